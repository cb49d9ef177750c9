"""Session 62: an avoid list's cost a step (restrict + advance), 256 rows of a 10,000-piece
vocabulary, phrases of 1-3 random tokens (as the spaced scripts' are) or of spelled raw
Japanese (RAW: s61-raw-ja.sh's OUT, its vocabulary and dev words), 10 and 1,000 phrases.
Run it with this tree's package and with another's on PYTHONPATH to compare.
    python benchmarks/runs/terms/s62-avoid-step.py [RAW]"""

import random
import sys
import time

import torch

from transduce.decoding.avoid import AvoidConstraint
from transduce.decoding.terms import Terms

ROWS, VOCABULARY, STEPS = 256, 10_000, 200
torch.set_num_threads(2)


class Nothing:
    """No avoid list: the harness's own cost a step (a copy of the scores, their argmax)."""

    def restrict(self, log_probs, room):
        pass

    def advance(self, tokens):
        pass


def per_step(avoided: Terms | None, vocabulary: int) -> float:
    """Milliseconds a step, the median of three runs of STEPS steps."""
    rng, times = torch.Generator().manual_seed(0), []
    for _ in range(3):
        state = (
            Nothing() if avoided is None else AvoidConstraint(avoided, ROWS, 3, torch.device("cpu"))
        )
        log_probs = torch.randn(ROWS, vocabulary, generator=rng).log_softmax(dim=1)
        start = time.perf_counter()
        for _ in range(STEPS):
            scores = log_probs.clone()
            state.restrict(scores, torch.full((ROWS,), 9))
            state.advance(scores.argmax(dim=1))
        times.append((time.perf_counter() - start) / STEPS * 1000)
    return sorted(times)[1]


rng = random.Random(0)
print(f"no list (the harness): {per_step(None, VOCABULARY):.2f} ms a step")
for count in (10, 1000):
    phrases = tuple(tuple(rng.randrange(4, VOCABULARY) for _ in range(rng.randint(1, 3)))
                    for _ in range(count))  # fmt: skip
    avoided = Terms(phrases, (False,) * count)
    print(f"{count} phrases of tokens: {per_step(avoided, VOCABULARY):.2f} ms a step")
if len(sys.argv) > 1:
    from pathlib import Path

    from transduce.data.bpe import Vocab
    from transduce.decoding.avoid import parse_avoided

    raw = Path(sys.argv[1])
    vocab = Vocab.load(raw / "tiny" / "vocab.model")
    words = sorted({w for w in (raw / "dev.tok.ja").read_text(encoding="utf-8").split()
                    if len(w) >= 2})  # fmt: skip
    rng.shuffle(words)
    for count in (10, 1000):
        avoided = parse_avoided(vocab, words[:count])
        print(f"{count} phrases of raw Japanese: {per_step(avoided, vocab.size):.2f} ms a step")

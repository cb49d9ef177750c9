"""Terminology simulated with the references: how well a model places given terms
(`translate --terms`, lexically constrained beam search).

A glossary says how a term must come out; here the reference stands in for it (as Post and
Vilar 2018 and Hu et al. 2019 measure): for each sentence, N words of its reference that the
model's own translation lacks (--terms N, words of at least --min-letters letters; the case a
glossary is for), drawn with a fixed seed. Then, for each beam of --beams:

- terms held: the share of terms the output holds as whole words, without and with --terms
  (the search guarantees its tokens; this counts words, what a reader sees);
- BLEU of the output against the reference, without and with terms;
- the decoding time, against the same beam without terms.

    python benchmarks/terms.py --model RUN --data PREPARED [--split test] [--terms 1 2]
        [--beams 4 8] [--lowercase-tokenized] [--words TOKENIZED_REFERENCES]
        [--no-repeat-ngram N]

PREPARED holds `{split}.src.txt` and `{split}.tgt.txt` (a `prepare`d folder). Prints a line
per term count and beam. For raw text of a script without spaces (Japanese as running text),
`--words` gives the references tokenized, a line each, to draw the words from; a word is held
as `transduce.term_use` holds it (`transduce/writing.py`: inside running Japanese too).
"""

from __future__ import annotations

import argparse
import random
import re
import time
from dataclasses import replace
from pathlib import Path

import transduce
from transduce.data.corpus import read_lines
from transduce.tasks.translation import is_tokenized, scoring
from transduce.writing import as_words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--terms", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--min-letters", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lowercase-tokenized", action="store_true")
    parser.add_argument("--words", type=Path, help="the references tokenized, to draw words from")
    parser.add_argument("--no-repeat-ngram", type=int, default=0,
                        help="both searches' rule (0: off); the terms are drawn from the output "
                        "without it, the same for every N")  # fmt: skip
    args = parser.parse_args()
    translator = transduce.load(args.model)
    task = scoring(True) if args.lowercase_tokenized else translator.task.config  # the model's
    stem = args.data / args.split
    split = transduce.read_parallel(f"{stem}.src.txt", f"{stem}.tgt.txt")  # equal line counts
    sources, references = split.src, split.tgt
    words = references if args.words is None else read_lines(args.words)
    if len(words) != len(references):
        raise SystemExit(f"--words has {len(words)} lines, the references {len(references)}")
    tokenized = is_tokenized(translator.task.config)
    print(f"{args.model}, {args.split} ({len(sources)} lines)")
    for beam in args.beams:
        decode = replace(translator.decode, beam_size=beam, terms_beam=beam,  # this beam
                         no_repeat_ngram=args.no_repeat_ngram)  # fmt: skip
        began = time.perf_counter()
        own = [hyps[0][0] for hyps in translator.translate(sources, decode)]
        plain_seconds = time.perf_counter() - began
        plain_bleu = transduce.score(own, references, task).score
        unruled = replace(decode, no_repeat_ngram=0)  # the terms drawn alike for every rule
        drawn = (
            own if decode == unruled else [h[0][0] for h in translator.translate(sources, unruled)]
        )
        for count in args.terms:
            rng = random.Random(args.seed)
            pairs = zip(drawn, words, strict=True)
            terms = [missed(o, r, count, args.min_letters, rng, tokenized) for o, r in pairs]
            terms = [[t for t in line if not translator.vocab.lacking(t)] for line in terms]
            began = time.perf_counter()
            found = translator.translate(sources, decode, terms=terms)
            seconds = time.perf_counter() - began
            outputs = [hyps[0][0] for hyps in found]
            bleu = transduce.score(outputs, references, task).score
            asked = sum(map(len, terms))
            before, after = held(own, terms, tokenized), held(outputs, terms, tokenized)
            print(f"beam {beam}, {count} term(s) a line ({asked} in all, on "
                  f"{sum(map(bool, terms))} lines): held {before}/{asked} without, "
                  f"{after}/{asked} with; BLEU {plain_bleu:.2f} -> {bleu:.2f}; "
                  f"{plain_seconds:.1f} s -> {seconds:.1f} s")  # fmt: skip


def missed(output: str, reference: str, count: int, letters: int, rng: random.Random,
           tokenized: bool):  # fmt: skip
    """Up to `count` distinct words of the (tokenized) reference the output lacks, of at least
    `letters` letters, in the reference's order."""
    words = {w for w in reference.split() if w.isalpha() and len(w) >= letters}
    lacking = sorted(w for w in words if not holds(output, w, tokenized))
    chosen = set(rng.sample(lacking, min(count, len(lacking))))
    return [w for w in dict.fromkeys(reference.split()) if w in chosen]


def holds(output: str, term: str, tokenized: bool) -> bool:
    """As term use counts: a whole word, or inside running text of a script without spaces."""
    return re.search(as_words(term, tokenized), output) is not None


def held(outputs: list[str], terms: list[list[str]], tokenized: bool) -> int:
    """Terms the outputs hold."""
    pairs = zip(outputs, terms, strict=True)
    return sum(holds(output, term, tokenized) for output, line in pairs for term in line)


if __name__ == "__main__":
    main()

"""Session 62: the cost of many terms a line in raw Japanese (a stress, not a use): 16 dev
lines, each with K words drawn from the dev references (2+ characters), K = 1, 4, 16; seconds
to translate them with the terms, beam 8. Run with this tree's package and with another's on
PYTHONPATH to compare.
    python benchmarks/runs/terms/s62-many-terms.py RAW   (RAW: s61-raw-ja.sh's OUT)"""

import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import transduce

raw = Path(sys.argv[1])
lines = (raw / "dev.en").read_text(encoding="utf-8").splitlines()[:16]
words = sorted({w for w in (raw / "dev.tok.ja").read_text(encoding="utf-8").split() if len(w) >= 2})
translator = transduce.load(raw / "tiny")
words = [w for w in words if not translator.vocab.lacking(w)]  # those an output can hold
decode = replace(translator.decode, beam_size=8)
translator.translate(lines[:2], decode, terms=[[words[0]], []])  # warm: the vocabulary's index
for count in (1, 4, 16):
    rng = random.Random(count)
    terms = [rng.sample(words, count) for _ in lines]
    start = time.perf_counter()
    outputs = translator.translate(lines, decode, terms=terms)
    seconds = time.perf_counter() - start
    held = sum(
        all(t in best[0][0] for t in line) for best, line in zip(outputs, terms, strict=True)
    )
    print(f"{count} term(s) a line: {seconds:.1f} s for {len(lines)} lines, all held in {held}")

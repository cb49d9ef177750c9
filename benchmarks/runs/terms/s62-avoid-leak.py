"""Session 62: how often an avoid list leaks in raw Japanese. The model's own dev outputs, the
N commonest words of them (words of 2+ characters from the tokenized references, found in the
outputs' running text), avoided all at once; then how many outputs still hold one.
    python benchmarks/runs/terms/s62-avoid-leak.py RAW [N]   (RAW: s61-raw-ja.sh's OUT)"""

import collections
import sys
import time
from pathlib import Path

import transduce

raw, most = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 20
lines = (raw / "dev.en").read_text(encoding="utf-8").splitlines()
words = set((raw / "dev.tok.ja").read_text(encoding="utf-8").split())
words = {w for w in words if len(w) >= 2 and any(c.isalnum() for c in w)}
translator = transduce.load(raw / "tiny")
start = time.perf_counter()
plain = [best[0][0] for best in translator.translate(lines)]
plain_seconds = time.perf_counter() - start
counts = collections.Counter(w for out in plain for w in words if w in out)
avoided = [w for w, _ in counts.most_common(most)]
start = time.perf_counter()
guided = [best[0][0] for best in translator.translate(lines, avoid=avoided)]
seconds = time.perf_counter() - start


def holding(outputs):
    return sum(any(w in out for w in avoided) for out in outputs)


print(
    f"{raw / 'tiny'}, dev ({len(lines)} lines); avoided the {most} commonest words: "
    f"{avoided[:20]}{' ...' if most > 20 else ''}"
)
print(
    f"outputs holding one: {holding(plain)} without the list, {holding(guided)} with it "
    f"({plain_seconds:.1f} s without, {seconds:.1f} s with)"
)
leaks = [(out, [w for w in avoided if w in out]) for out in guided]
for out, found in [leak for leak in leaks if leak[1]][:5]:
    print("  leak:", out, found)

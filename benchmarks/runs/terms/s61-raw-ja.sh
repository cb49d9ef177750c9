#!/usr/bin/env bash
# Session 61: en->ja on raw Japanese, as running text writes it ("私は犬が好きです。"): the
# small_parallel_enja corpus with the spaces between its Japanese tokens taken out (a space
# stays only between two characters of spaced scripts, "iPhone 15"). Prepared as `files`
# (raw text: BLEU on characters, by --tgt ja), `tiny` trained for MINUTES, then the terms
# benchmark with words drawn from the tokenized references, held as running text holds them.
#     benchmarks/runs/terms/s61-raw-ja.sh OUT [MINUTES]
set -euo pipefail
out=$1 minutes=${2:-30}
data=${TRANSDUCE_DATA:-../shared/data}/small_parallel_enja
mkdir -p "$out"
for split in train dev; do
  gzip -dc "$data/$split.en.gz" > "$out/$split.en"
  gzip -dc "$data/$split.ja.gz" > "$out/$split.tok.ja"
  python - "$out/$split.tok.ja" "$out/$split.ja" <<'PY'
import re, sys
from transduce.writing import unspaced
def running(line):  # drop a space that has a character of a script without spaces beside it
    return re.sub(r"(?<=(\S)) (?=(\S))", lambda m: "" if unspaced(m.group(1)) or unspaced(m.group(2)) else " ", line)
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as g:
    g.writelines(running(line.rstrip("\n")) + "\n" for line in f)
PY
done
transduce prepare files --src en --tgt ja --train-src "$out/train.en" --train-tgt "$out/train.ja" \
  --dev-src "$out/dev.en" --dev-tgt "$out/dev.ja" --out "$out/data"
transduce train --data "$out/data" --preset tiny --out "$out/tiny" --max-minutes "$minutes" \
  --max-steps 1000000
python benchmarks/terms.py --model "$out/tiny" --data "$out/data" --split dev --terms 1 2 \
  --beams 8 --min-letters 2 --words "$out/dev.tok.ja"

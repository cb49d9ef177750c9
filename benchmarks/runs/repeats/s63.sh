#!/usr/bin/env bash
# Session 63: what `--no-repeat-ngram N` does to four models' outputs (benchmarks/repeats.py):
# the demo's 10-minute `tiny` en->de (DEMO: its folder, run/ and data/), a weaker one (WEAK: a
# `tiny` en->de of 1,000 updates, session 58's back-translation baseline; WEAK_DATA: its data),
# the 30-minute raw en->ja `tiny` (RAW: s61-raw-ja.sh's OUT), and that model with terms, after
# which its weak search may loop (benchmarks/terms.py, the terms of s62-spelled.sh).
#     benchmarks/runs/repeats/s63.sh DEMO WEAK WEAK_DATA RAW
set -euo pipefail
demo=$1 weak=$2 weak_data=$3 raw=$4
here=$(cd "$(dirname "$0")/../../.." && pwd)
cd /tmp
echo "== the demo's model, test, the run's beam"
python "$here/benchmarks/repeats.py" --model "$demo/run" --data "$demo/data" --sizes 0 2 3 4
echo "== tiny, 1,000 updates, test"
python "$here/benchmarks/repeats.py" --model "$weak" --data "$weak_data" --sizes 0 2 3 4
echo "== raw en->ja tiny, dev"
python "$here/benchmarks/repeats.py" --model "$raw/tiny" --data "$raw/data" --split dev \
  --sizes 0 2 3 4
for n in 0 3 4; do
  echo "== raw en->ja tiny, dev, terms, no_repeat_ngram $n"
  python "$here/benchmarks/terms.py" --model "$raw/tiny" --data "$raw/data" --split dev \
    --terms 1 2 --beams 8 --min-letters 2 --words "$raw/dev.tok.ja" --no-repeat-ngram "$n"
done

#!/usr/bin/env bash
# Session 62: terms in raw Japanese followed by their characters (any pieces that spell them)
# against session 61's one glued spelling, on s61-raw-ja.sh's model (RAW: its OUT folder),
# the same terms; then pre-tokenized en->ja (ENJA: the 30-minute model and its data folder),
# whose terms keep their tokens: its numbers must be session 61's.
#     benchmarks/runs/terms/s62-spelled.sh RAW ENJA_MODEL ENJA_DATA BEFORE_CHECKOUT
set -euo pipefail
raw=$1 enja_model=$2 enja_data=$3 before=$4
here=$(cd "$(dirname "$0")/../../.." && pwd)
raw_args=(--model "$raw/tiny" --data "$raw/data" --split dev --terms 1 2 --beams 8
  --min-letters 2 --words "$raw/dev.tok.ja")
cd /tmp
echo "== raw Japanese, spelled (this tree)"
python "$here/benchmarks/terms.py" "${raw_args[@]}"
echo "== raw Japanese, one glued spelling ($(git -C "$before" rev-parse --short HEAD))"
PYTHONPATH="$before" python "$before/benchmarks/terms.py" "${raw_args[@]}"
echo "== pre-tokenized en->ja (this tree)"
python "$here/benchmarks/terms.py" --model "$enja_model" --data "$enja_data" --split dev \
  --terms 1 2 --beams 8 --min-letters 2 --lowercase-tokenized

#!/usr/bin/env bash
# Session 48: the loss's products with the output weight in bfloat16 on the bf16 route (NEW, this
# checkout) against float32 (OLD, a checkout of d2bac24), `train_step.py`, alternated, 3 rounds.
#   benchmarks/runs/speed/s48-bf16-loss-ab.sh PREPARED_DATA OLD_CHECKOUT [PRESET]
set -euo pipefail
data=$1 old=$2 preset=${3:-small}
grep -m1 "model name" /proc/cpuinfo
for round in 1 2 3; do
  for side in old new; do
    echo "== $preset, $side, round $round"
    if [ $side = old ]; then path=$old; else path=$PWD; fi
    PYTHONPATH=$path python "$path/benchmarks/train_step.py" --prepared "$data" --preset "$preset" \
      --updates 60 | head -n 1
  done
done

#!/usr/bin/env bash
# Session 49: this checkout (NEW) against another (OLD), `train_step.py` as a user gets the
# preset (on a Xeon with AMX, `small` takes the bfloat16 route), alternated run after run.
#   benchmarks/runs/speed/s49-ab.sh PREPARED_DATA OLD_CHECKOUT [PRESET] [ROUNDS] [UPDATES]
set -euo pipefail
data=$1 old=$2 preset=${3:-small} rounds=${4:-3} updates=${5:-80}
grep -m1 "model name" /proc/cpuinfo
for round in $(seq "$rounds"); do
  for side in old new; do
    echo "== $preset, $side, round $round"
    if [ $side = old ]; then path=$old; else path=$PWD; fi
    PYTHONPATH=$path python "$path/benchmarks/train_step.py" --prepared "$data" --preset "$preset" \
      --updates "$updates" | sed -n 1p
  done
done

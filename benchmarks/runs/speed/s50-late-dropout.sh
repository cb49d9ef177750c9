#!/usr/bin/env bash
# Session 50: late dropout (train.late_dropout=K: the first K updates without dropout, then the
# model's rates; Liu et al. 2023) on issue 17's two short runs, each as a user runs it otherwise
# (train.precision=auto: bfloat16 on this AMX host), one after the other, the CPU to itself:
#   small's 15 minutes (dropout 0.1 from update K) against sessions 47-49's runs of the preset;
#   the demo's 10 minutes with dropout 0.1 from update K against session 49's (no dropout).
#   benchmarks/runs/speed/s50-late-dropout.sh PREPARED_DATA DATA_DIR OUT K
set -euo pipefail
prepared=$1 data=$2 out=$3 k=$4
grep -m1 "model name" /proc/cpuinfo
date -u
python benchmarks/time_to_quality.py --toolkit transduce --prepared "$prepared" \
  --out "$out/ttq-late-$k" --minutes 15 --set "train.late_dropout=$k"
date -u
transduce demo --data-dir "$data" --out "$out/demo-late-$k" \
  --set model.dropout=0.1 "train.late_dropout=$k"
date -u

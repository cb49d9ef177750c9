#!/usr/bin/env bash
# Session 50: `tiny`'s hour with late dropout (its dropout of 0.3 from update 801, none before:
# train.late_dropout=800), seed 1, against run 21 (the same seed and host, dropout throughout).
#   benchmarks/runs/tiny60/s50-late-dropout.sh OUT
set -euo pipefail
grep -m1 "model name" /proc/cpuinfo
date -u
TRANSDUCE_DATA=${TRANSDUCE_DATA:-../shared/data} TRAIN_ARGS="--set train.late_dropout=800" \
  benchmarks/translation.sh multi30k en de tok 60 "$1"
date -u

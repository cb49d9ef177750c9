#!/usr/bin/env bash
# Session 47: bf16's product caches at 64 entries (the route's own) against 8 (the float32
# route's), `small` and `tiny`, one process per trial, alternated, two rounds.
#   benchmarks/runs/speed/s47-bf16-cache.sh PREPARED_DATA > benchmarks/runs/speed/s47-bf16-cache.txt
set -euo pipefail
data=$1
grep -m1 "model name" /proc/cpuinfo
for preset in small tiny; do
  for round in 1 2; do
    for cap in 64 8; do
      echo "== $preset bf16, caches of $cap, round $round"
      ONEDNN_PRIMITIVE_CACHE_CAPACITY=$cap LRU_CACHE_CAPACITY=$cap python benchmarks/train_step.py \
        --prepared "$data" --preset $preset --updates 60 --set train.precision=bf16 | head -n 1
    done
  done
done

#!/usr/bin/env bash
# Session 48: base bf16 with the product caches at 64, 16 and 8 entries, alternated, two rounds.
set -euo pipefail
data=$1
grep -m1 "model name" /proc/cpuinfo
for round in 1 2; do
  for cap in 64 16 8; do
    echo "== base bf16, caches of $cap, round $round"
    ONEDNN_PRIMITIVE_CACHE_CAPACITY=$cap LRU_CACHE_CAPACITY=$cap python benchmarks/train_step.py \
      --prepared "$data" --preset base --updates 20 --timed 10 \
      --set data.max_tokens=4096 train.precision=bf16 | head -n 1
  done
done

#!/usr/bin/env bash
# Session 48: which of the two caches holds base's extra memory under bf16.
set -euo pipefail
data=$1
grep -m1 "model name" /proc/cpuinfo
for c in "64 64" "64 8" "8 64" "8 8"; do
  set -- $c
  echo "== base bf16, oneDNN cache $1, ideep LRU cache $2"
  ONEDNN_PRIMITIVE_CACHE_CAPACITY=$1 LRU_CACHE_CAPACITY=$2 python benchmarks/train_step.py \
    --prepared "$data" --preset base --updates 20 --timed 10 \
    --set data.max_tokens=4096 train.precision=bf16 | head -n 1
done

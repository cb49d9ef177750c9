#!/usr/bin/env bash
# Session 47: where `base`'s extra peak memory under train.precision=bf16 goes (~+1 GB, session
# 46): float32, bf16 with its product caches at 64 entries (the route's own), bf16 with them held
# at 8 (the float32 route's; the user's setting wins). One process each, 2 threads.
#   benchmarks/runs/speed/s47-bf16-memory.sh PREPARED_DATA > benchmarks/runs/speed/s47-bf16-memory.txt
set -euo pipefail
data=$1
grep -m1 "model name" /proc/cpuinfo
run() {
  python benchmarks/train_step.py --prepared "$data" --preset base --updates 30 --timed 20 \
    --set data.max_tokens=4096 "$@" | head -n 1
}
for round in 1 2; do
  echo "== round $round: fp32"; run train.precision=fp32
  echo "== round $round: bf16, caches of 64"; run train.precision=bf16
  echo "== round $round: bf16, caches of 8"
  ONEDNN_PRIMITIVE_CACHE_CAPACITY=8 LRU_CACHE_CAPACITY=8 run train.precision=bf16
done

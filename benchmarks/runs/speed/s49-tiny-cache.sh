#!/usr/bin/env bash
# Session 49: `tiny` in float32 (its default) and on the bfloat16 route with oneDNN's and ideep's
# product caches at 8, 16 and 64 entries (set through the environment, which wins over the
# project's default), alternated, three rounds: speed and peak resident memory. SIDES and
# UPDATES (60) choose the arms and the run's length.
#   benchmarks/runs/speed/s49-tiny-cache.sh PREPARED_DATA
set -euo pipefail
data=$1
grep -m1 "model name" /proc/cpuinfo
for round in 1 2 3; do
  for side in ${SIDES:-fp32 bf16-8 bf16-16 bf16-64}; do
    echo "== tiny, $side, round $round"
    case $side in
      fp32) precision=fp32 entries=8 ;;
      bf16-*) precision=bf16 entries=${side#bf16-} ;;
    esac
    ONEDNN_PRIMITIVE_CACHE_CAPACITY=$entries LRU_CACHE_CAPACITY=$entries \
      python benchmarks/train_step.py --prepared "$data" --preset tiny \
      --updates ${UPDATES:-60} --set train.precision=$precision | sed -n 1p
  done
done

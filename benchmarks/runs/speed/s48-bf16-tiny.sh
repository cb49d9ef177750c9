#!/usr/bin/env bash
# Session 48: `tiny` in float32 (its default), in bf16 with the loss in float32 (OLD checkout,
# d2bac24) and in bf16 with the loss's products in bfloat16 (NEW, this checkout), alternated.
#   benchmarks/runs/speed/s48-bf16-tiny.sh PREPARED_DATA OLD_CHECKOUT
set -euo pipefail
data=$1 old=$2
grep -m1 "model name" /proc/cpuinfo
for round in 1 2; do
  for side in fp32 old-bf16 new-bf16; do
    echo "== tiny, $side, round $round"
    case $side in
      fp32) path=$PWD precision=fp32 ;;
      old-bf16) path=$old precision=bf16 ;;
      new-bf16) path=$PWD precision=bf16 ;;
    esac
    PYTHONPATH=$path python "$path/benchmarks/train_step.py" --prepared "$data" --preset tiny \
      --updates 60 --set train.precision=$precision | head -n 1
  done
done

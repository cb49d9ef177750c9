#!/usr/bin/env bash
# Session 64: training's products in bfloat16 against float32 on an AMD EPYC of Zen 4 (family 25,
# model 17: AVX-512 with BF16 and VNNI, no AMX), one process per trial, alternated (fp32 bf16 fp32
# bf16) a preset. The trials of the record ran before `bf16.supported` took AVX-512 BF16 (the
# probe was forced to True in each process: the same route this script now takes).
#   benchmarks/runs/speed/s64-zen4-bf16.sh PREPARED_DATA > benchmarks/runs/speed/s64-zen4-bf16.txt
set -euo pipefail
data=$1
grep -m1 "model name" /proc/cpuinfo
grep -m1 -E "^model\s" /proc/cpuinfo
for preset in tiny small; do
  for precision in fp32 bf16 fp32 bf16; do
    echo "== $preset $precision"
    python benchmarks/train_step.py --prepared "$data" --preset "$preset" --updates 60 \
      --set train.precision=$precision | tail -n 2
  done
done

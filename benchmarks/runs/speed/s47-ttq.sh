#!/usr/bin/env bash
# Session 47: the target measure of issue 17 (dev BLEU 35 at `small` within 15 minutes), the
# preset as a user gets it, float32 against train.precision=bf16, on a Xeon with AMX; one run at a
# time, the CPU to itself, bf16 first.
#   benchmarks/runs/speed/s47-ttq.sh PREPARED_DATA OUT
set -euo pipefail
data=$1 out=$2
grep -m1 "model name" /proc/cpuinfo
for precision in bf16 fp32; do
  python benchmarks/time_to_quality.py --toolkit transduce --prepared "$data" \
    --out "$out/ttq-$precision" --minutes 15 --set train.precision=$precision
done

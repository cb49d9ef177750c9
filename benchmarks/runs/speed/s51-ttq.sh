#!/usr/bin/env bash
# Session 51: issue 17's target measure again (dev BLEU 35 at `small` within 15 minutes), the
# preset exactly as a user gets it (train.precision=auto: bfloat16 on this AMX host), the CPU to
# itself, with fused Adam and validation's greedy batches of 256 (session 51).
#   benchmarks/runs/speed/s51-ttq.sh PREPARED_DATA OUT
set -euo pipefail
data=$1 out=$2
grep -m1 "model name" /proc/cpuinfo
python benchmarks/time_to_quality.py --toolkit transduce --prepared "$data" \
  --out "$out/ttq-auto" --minutes 15

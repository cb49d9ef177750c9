#!/usr/bin/env bash
# Session 52: issue 17's target measure again (dev BLEU 35 at `small` within 15 minutes), the
# preset exactly as a user gets it (train.precision=auto: bfloat16 on this AMX host), the CPU to
# itself, with session 52's dropout (the mask drawn by SFC64, applied as a product).
#   benchmarks/runs/speed/s52-ttq.sh PREPARED_DATA OUT
set -euo pipefail
data=$1 out=$2
grep -m1 "model name" /proc/cpuinfo
python benchmarks/time_to_quality.py --toolkit transduce --prepared "$data" \
  --out "$out/ttq-auto" --minutes 15

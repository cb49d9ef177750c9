#!/usr/bin/env bash
# Session 49: the demo's ten minutes as a user gets them (float32: `tiny` stays off the bf16
# route under `auto`) against the same with `train.precision=bf16` (the route, its FFN hidden
# units in bfloat16), one after the other, the CPU to itself, seed 1.
#   benchmarks/runs/demo/s49-bf16.sh DATA_DIR OUT
set -euo pipefail
data=$1 out=$2
grep -m1 "model name" /proc/cpuinfo
date -u
transduce demo --data-dir "$data" --out "$out/demo-fp32"
date -u
transduce demo --data-dir "$data" --out "$out/demo-bf16" --set train.precision=bf16
date -u

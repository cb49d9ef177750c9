#!/usr/bin/env bash
# Session 66, an AMD EPYC of Zen 4 (AVX-512 BF16, no AMX): target 4's decoding with decoding's
# products in bfloat16 (`decode.precision=auto` takes them on this CPU), beside float32, int8 and
# CTranslate2 float32 and int8, on session 64's `small` after 15 minutes (bfloat16 training).
# One run at a time, the CPU to itself.
#   benchmarks/runs/speed/s66-zen4-bf16-decode.sh RUN PREPARED_DATA OUT
# PREPARED_DATA: transduce prepare multi30k --src en --tgt de --variant tok --vocab-size 8000
set -euo pipefail
run=$1 data=$2 out=$3
python benchmarks/speed_decode.py --model "$run" --prepared "$data" --out "$out" \
  --batches 64 1 --rounds 3 \
  --engines "transduce,transduce fp32,ctranslate2,transduce int8,ctranslate2 int8"

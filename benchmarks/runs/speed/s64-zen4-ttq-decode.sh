#!/usr/bin/env bash
# Session 64, an AMD EPYC of Zen 4 (AVX-512 BF16, no AMX): `small`'s 15 minutes in bfloat16 and
# float32 (session 47's script), then target 4's decoding on the bfloat16 run's model, beside
# CTranslate2 float32 and int8. One run at a time, the CPU to itself.
#   benchmarks/runs/speed/s64-zen4-ttq-decode.sh PREPARED_DATA OUT
# PREPARED_DATA: transduce prepare multi30k --src en --tgt de --variant tok --vocab-size 8000
set -euo pipefail
data=$1 out=$2
bash benchmarks/runs/speed/s47-ttq.sh "$data" "$out/ttq"
python benchmarks/speed_decode.py --model "$out/ttq/ttq-bf16/run" --prepared "$data" \
  --out "$out/dec" --batches 64 1 --rounds 3 \
  --engines "transduce,ctranslate2,transduce int8,ctranslate2 int8"

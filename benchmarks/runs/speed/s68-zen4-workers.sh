#!/usr/bin/env bash
# Session 68, an AMD EPYC of Zen 4 (AVX-512 BF16, no AMX), 2 cores: target 4's decoding with the
# batches shared by one process per thread (`decode.workers=0`, the default; decoding/workers.py)
# beside one process whose two threads share each batch (`--workers 1`), and CTranslate2 as it
# was measured before (one translator, two threads) and with one translator per thread
# (`inter_threads=2`, its own way of sharing batches), float32 and int8, on session 64's `small`
# after 15 minutes. One run at a time, the CPU to itself.
#   benchmarks/runs/speed/s68-zen4-workers.sh RUN PREPARED_DATA OUT
# PREPARED_DATA: transduce prepare multi30k --src en --tgt de --variant tok --vocab-size 8000
set -euo pipefail
run=$1 data=$2 out=$3
python benchmarks/speed_decode.py --model "$run" --prepared "$data" --out "$out" \
  --batches 64 1 --rounds 3 \
  --engines "transduce,transduce 1 process,ctranslate2,ctranslate2 replicas,transduce int8,transduce int8 1 process,ctranslate2 int8,ctranslate2 int8 replicas"

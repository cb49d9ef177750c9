#!/usr/bin/env bash
# Session 69, an AMD EPYC of Zen 4 (AVX-512 BF16, no AMX), 2 cores: decoding with 8 compiled
# products cached (training's setting) against 32 (what `translate` and `serve` now set), on a
# `small` trained 15 minutes (benchmarks/time_to_quality.py --minutes 15), beam 4. One run at a
# time, the CPU to itself.
#   benchmarks/runs/speed/s69-product-cache.sh RUN PREPARED_DATA TEST_SOURCE_TEXT
# PREPARED_DATA: transduce prepare multi30k --src en --tgt de --variant tok --vocab-size 8000
set -euo pipefail
run=$1 data=$2 text=$3
probe=benchmarks/runs/speed/s69-product-cache.py
# Compilations over 50 sentences at batch 1, one process.
for size in 8 32 1024; do
  echo "cache $size: $(ONEDNN_PRIMITIVE_CACHE_CAPACITY=$size LRU_CACHE_CAPACITY=$size ONEDNN_VERBOSE=2 \
    python $probe --one "$run" "$data" 1 50 1 | grep -c create:cache_miss) compilations"
done
# Decoding time, fresh processes, sizes alternated: one process, then the default workers.
python $probe "$run" "$data" 64 1000 1 3 8 32
python $probe "$run" "$data" 1 100 1 3 8 32
python $probe "$run" "$data" 1 200 0 4 8 32
python $probe "$run" "$data" 64 1000 0 4 8 32
# `transduce translate` as a user runs it (one process): 32 by default against the user's 8.
head -200 "$text" > /tmp/s69-200.txt
for round in 1 2 3; do
  for size in default 8; do
    for batch in 64 1; do
      input=$text; [ "$batch" = 1 ] && input=/tmp/s69-200.txt
      settings=(); [ "$size" = 8 ] && settings=(ONEDNN_PRIMITIVE_CACHE_CAPACITY=8 LRU_CACHE_CAPACITY=8)
      echo "cache=$size batch=$batch seconds,peak_kib=$( { env "${settings[@]}" /usr/bin/time \
        -f "%e %M" transduce -q translate --model "$run" --input "$input" --output /dev/null \
        --batch-size "$batch" --workers 1; } 2>&1 | tail -1)"
    done
  done
done

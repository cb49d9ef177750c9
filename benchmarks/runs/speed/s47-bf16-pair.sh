#!/usr/bin/env bash
# Session 47: session 46's side-by-side quality pair again with a second seed: `small` trained
# float32 and train.precision=bf16 at once, one thread each pinned to its own core, the same
# seed, batches and initial weights, 1,500 updates; then each final model decodes dev and test
# (its preset's beam 4) and is scored lowercased tokenized.
#   benchmarks/runs/speed/s47-bf16-pair.sh PREPARED_DATA OUT SEED
set -euo pipefail
data=$1 out=$2 seed=$3
grep -m1 "model name" /proc/cpuinfo
core=0
for precision in fp32 bf16; do
  taskset -c $core transduce train --data "$data" --preset small --out "$out/q$seed-$precision" \
    --max-steps 1500 --set train.threads=1 train.precision=$precision train.seed=$seed \
    > "$out/q$seed-$precision.log" 2>&1 &
  core=$((core + 1))
done
wait
for precision in fp32 bf16; do
  for split in dev test; do
    transduce translate --model "$out/q$seed-$precision" --input "$data/$split.src.txt" \
      --output "$out/q$seed-$precision.$split.hyp" 2> /dev/null
    echo "$precision $split $(transduce evaluate --hyp "$out/q$seed-$precision.$split.hyp" \
      --ref "$data/$split.tgt.txt" --lowercase-tokenized | head -n 1)"
  done
done

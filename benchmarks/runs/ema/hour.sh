#!/usr/bin/env bash
# Session 41 (throwaway, kept as the record): a preset's timed run with EMAs of the weights kept
# beside its final model (the checkpoint average, or the newest checkpoint), each scored on dev
# and test, lowercased tokenized: a paired comparison on one trajectory.
#
#   DATA=bench/s41/data DECAYS=0.996,0.998,0.999 benchmarks/runs/ema/hour.sh SEED OUT
#   DATA=... DECAYS=0.98,0.99,0.995 PRESET=demo MINUTES=10 benchmarks/runs/ema/hour.sh SEED OUT
set -euo pipefail
seed=$1 out=$2 data=${DATA:-data} decays=${DECAYS:-0.996,0.998,0.999}
python benchmarks/runs/ema/ema_train.py "$decays" -- --data "$data" --preset "${PRESET:-tiny}" \
  --out "$out" --max-minutes "${MINUTES:-60}" --max-steps 1000000 --set train.seed="$seed"
for m in average ${decays//,/ }; do
  f=$out/$m.pt; [ "$m" = average ] || f=$out/ema-$m.pt
  for split in dev test; do
    transduce translate --model "$out" --checkpoint "$f" --input "$data/$split.src.txt" \
      --output "$out/$m.$split.hyp"
    bleu=$(transduce evaluate --hyp "$out/$m.$split.hyp" --ref "$data/$split.tgt.txt" \
      --lowercase-tokenized | head -1)
    echo "$m $split $bleu" | tee -a "$out/scores.txt"
  done
done

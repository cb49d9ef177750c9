#!/usr/bin/env bash
# Two `tiny` models trained at once within one hour, one thread each, then decoded as their
# ensemble: the hour's spare updates spent on a second model (issue 17, target 2; a probe for a
# host with updates to spare, not for an AVX2-only host, where each twin gets ~2,000).
#
#   benchmarks/runs/tiny60/s56-twins.sh OUT [MINUTES]
#
# Why: on the AVX2-only AMD EPYC of session 56, two single-thread trainings side by side gave
# 2,166 + 2,199 target tokens/s, 1.12-1.15x one two-thread training's 3,787-3,914 (train_step.py,
# `tiny`, same data); two hours' models together gained 0.56-0.85 test BLEU over their members
# (RESULTS.md, "Ensembles of `tiny`'s hours"). Each twin gets ~0.57 of the hour's updates.
set -euo pipefail
out=$1 minutes=${2:-60}
data_dir=${TRANSDUCE_DATA:-../shared/data}
mkdir -p "$out"
transduce prepare multi30k --src en --tgt de --variant tok --data-dir "$data_dir" \
  --vocab-size 10000 --out "$out/data"
for seed in 1 2; do
  transduce train --data "$out/data" --preset tiny --out "$out/seed$seed" --max-minutes "$minutes" \
    --max-steps 1000000 --set train.threads=1 train.seed=$seed > "$out/seed$seed.log" 2>&1 &
done
wait
score() {  # name, then the models
  local name=$1; shift
  local models=(); for m in "$@"; do models+=(--model "$m"); done
  transduce translate "${models[@]}" --input "$out/data/test.src.txt" --output "$out/$name.test.hyp"
  echo "$name: $(transduce evaluate --hyp "$out/$name.test.hyp" --ref "$out/data/test.tgt.txt" \
    --lowercase-tokenized | head -1)" | tee -a "$out/scores.txt"
}
score seed1 "$out/seed1"
score seed2 "$out/seed2"
score twins "$out/seed1" "$out/seed2"

#!/usr/bin/env bash
# The parsing result of issue 15 in one command: `parse-tiny` on 25%, 50% and 100% of the
# treebank's training trees (the learning curve) and the LSTM with attention (`rnn-tiny`) on
# 100%, each trained for STEPS updates and scored by benchmarks/parsing.sh (beam 21, alpha 0.3,
# EVALB with COLLINS.prm), JOBS runs at a time with THREADS torch threads each.
#
#   STEPS=4000 JOBS=2 THREADS=1 benchmarks/parsing_curve.sh [OUT]     (the defaults; OUT bench/parse-curve)
#
# Run again, it resumes: a scored run is skipped, a trained one only scored (parsing.sh), a
# killed one goes on from its last checkpoint. Prints one Markdown row per run from each run's summary.json.
set -euo pipefail
out=${1:-bench/parse-curve}
steps=${STEPS:-4000} jobs=${JOBS:-2} threads=${THREADS:-1}
mkdir -p "$out"
runs=("parse-tiny 0.25" "parse-tiny 0.5" "parse-tiny 1.0" "rnn-tiny 1.0")
for run in "${runs[@]}"; do
  read -r preset fraction <<< "$run"
  name="$preset-$fraction"
  if [ -f "$out/$name/summary.json" ]; then echo "$name: done"; continue; fi  # scored already
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 10; done
  TRAIN_ARGS="--max-steps $steps --set train.threads=$threads train.valid_every=250" \
    benchmarks/parsing.sh 100000 "$out/$name" "$preset" "$fraction" 8000 \
    > "$out/$name.log" 2>&1 &
  echo "$(date +%H:%M) started $name (log: $out/$name.log)"
done
wait
echo "| model | training trees | updates | test F1 (all / <= 40) | repaired | constrained test F1 | dev F1 beam 21 | train minutes |"
echo "|---|---|---|---|---|---|---|---|"
for run in "${runs[@]}"; do
  read -r preset fraction <<< "$run"
  python3 - "$out/$preset-$fraction/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"| {s['preset']} | {s['train_trees']:,} | {s['updates']} | "
      f"{s['test_f1_gold_tags_all']:.2f} / {s['test_f1_gold_tags_len40']:.2f} | "
      f"{s['repaired']} | {s['test_f1_constrained_all']:.2f} | {s['dev_f1_gold_tags_beam21']:.2f} | "
      f"{s['wall_seconds']['train'] / 60:.0f} |")
PY
done

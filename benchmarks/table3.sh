#!/usr/bin/env bash
# Table 3 (s6.2) on Multi30k en->de at the `tiny` base, on this project's 2-core CPU (issue 13).
#
#   benchmarks/table3.sh [OUT]        default bench/table3-tiny; run it again to resume
#   STEPS=600 WARMUP=200 SEEDS=2 JOBS=2 benchmarks/table3.sh OUT   (the defaults)
#   (SET: more KEY=VALUE overrides of the base; SWEEP_ARGS: more flags, e.g. "--rows base,A1")
#
# Every row of (A)-(E) and big, scaled to tiny (N 4, d_model 128, d_ff 256, h 4, d_k 32,
# P_drop 0.3), trained for STEPS updates (big: 3x), seed 1 for every row first, then seed 2 for
# the base and every row whose seed 1 is under 1 BLEU from the base's mean (--one-seed-beyond 1.0:
# the rows further away keep one seed). Each run is scored as the paper's Table 3: dev
# perplexity per subword and dev BLEU with beam 4 / alpha 0.6 from the last checkpoint, no
# averaging (lowercased, on Multi30k's tokens). OUT/table3.md, .csv and .json are rewritten
# after every run. Stopped (a session's end, Ctrl-C), it resumes when run again: a run in
# progress from its last checkpoint (every 250 updates); finished runs are not trained again.
#
# The base's schedule is shortened to the budget: tiny's peak rate, 0.005, comes at update
# WARMUP instead of 2,000 (eq. 3 with train.lr_scale = 0.005 * sqrt(128 * WARMUP)), so the
# last checkpoint is past the peak, and then falls as eq. 3 to the end: the table was run
# before `tiny` cooled its rate to 0 (train.cooldown, session 15), and cooldown=0 keeps a
# fresh clone's sweep the same as the runs kept below. Rows that change d_model change the peak with it, as eq. 3
# does in the paper.
#
# JOBS runs train at once, each in a process of its own with the cores shared out (1 thread each
# on 2 cores: two 1-thread runs of tiny did 1.43x the tokens of one 2-thread run, measured
# 2026-11-23). Seed 1 of base to C4 ran alone on 2 threads; the rows after them, two at a time on
# 1 thread each: their "minutes" are not comparable with the first ones'.
#
# Carried between machines: each finished run's result (ROW-seedN/sweep-result.json, with the
# config it was trained with) and the tables are copied to KEEP (default
# benchmarks/runs/table3-tiny, committed) after every run, and copied back into OUT before the
# sweep starts, so a fresh clone resumes where the last machine stopped (a run whose config
# differs is trained again). KEEP= (empty) turns this off.
#
# Duration: in units of one base run, seed 1 costs about 29 (big trains 3x the steps of a
# model 3x the cost; C5 about 2.6; C1 and C4 about half), and seed 2 about 16 if every
# row but C1, C4, C5 and big stays within 1 BLEU: about 45 base runs. A base run at the default
# 600 updates took 5.9 minutes on 2 idle cores (2026-11-23: 5 minutes of training, 1 of
# scoring), so about 4.5 hours in all: two sessions of this project, carried over by KEEP.
set -euo pipefail
out=${1:-bench/table3-tiny}
steps=${STEPS:-600} warmup=${WARMUP:-200} seeds=${SEEDS:-2} jobs=${JOBS:-2}
data_dir=${TRANSDUCE_DATA:-../shared/data}
lr_scale=$(python3 -c "print(round(0.005 * (128 * $warmup) ** 0.5, 6))")
keep=${KEEP-benchmarks/runs/table3-tiny}
mkdir -p "$out"
if [ -n "$keep" ] && [ -d "$keep" ]; then  # what earlier machines finished
  for saved in "$keep"/*/sweep-result.json; do
    [ -f "$saved" ] || continue
    run_dir="$out/$(basename "$(dirname "$saved")")"
    mkdir -p "$run_dir" && { [ -f "$run_dir/sweep-result.json" ] || cp "$saved" "$run_dir/"; }
  done
fi
keep_results() {
  [ -n "$keep" ] || return 0
  for saved in "$out"/*/sweep-result.json; do
    [ -f "$saved" ] || continue
    mkdir -p "$keep/$(basename "$(dirname "$saved")")" && cp "$saved" "$keep/$(basename "$(dirname "$saved")")/"
  done
  cp "$out"/table3.md "$out"/table3.csv "$out"/table3.json "$keep"/ 2>/dev/null || true
}
trap keep_results EXIT
( while sleep 60; do keep_results; done ) &  # a session may end mid-sweep: keep what is done
saver=$!
transduce prepare multi30k --src en --tgt de --variant tok --data-dir "$data_dir" \
  --vocab-size 10000 --out "$out/data"
transduce sweep --data "$out/data" --base tiny --rows table3 --seeds "$seeds" \
  --one-seed-beyond 1.0 --steps "$steps" --jobs "$jobs" --out "$out" ${SWEEP_ARGS:-} \
  --set train.warmup_steps="$warmup" train.lr_scale="$lr_scale" train.valid_every=250 \
  train.cooldown=0 ${SET:-} \
  2>&1 | tee -a "$out/sweep.log"
kill "$saver" 2>/dev/null || true

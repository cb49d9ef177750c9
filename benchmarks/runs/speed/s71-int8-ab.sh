#!/bin/bash
# Session 71: --int8 before (HEAD: the plan hands products to `linear`), after (the plan chooses
# int8 by rows), after + the output projection int8 at any rows; CTranslate2 int8, fp32 transduce.
source /work/main/.venv/bin/activate
cd /work/bench/s71
S="python /work/main/benchmarks/speed_decode.py --model ttq/run --prepared DATA --rounds 2 --batch-1-lines 100"
for r in 1 2; do
  PYTHONPATH=HEAD_WORKTREE $S --out ab/r$r-old --engines "transduce int8"
  $S --out ab/r$r-new --engines "transduce int8,ctranslate2 int8,transduce"
  PYTHONPATH=MINWEIGHT_SITECUSTOMIZE_DIR $S --out ab/r$r-minweight --engines "transduce int8"
done

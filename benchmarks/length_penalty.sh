#!/usr/bin/env bash
# Dev BLEU of one model at each length penalty alpha (beam search as the run decodes otherwise),
# for choosing alpha on dev, never on test.
#
#   benchmarks/length_penalty.sh MODEL DATA OUT [ALPHA ...]
#   e.g. benchmarks/length_penalty.sh bench/tiny60/run bench/tiny60/data bench/tiny60/alpha
#
# MODEL is a run folder or a checkpoint, DATA its prepared folder. Writes OUT/dev-A.hyp and prints
# one line per alpha: lowercased tokenized BLEU with its brevity penalty (as the benchmarks score).
set -euo pipefail
model=$1 data=$2 out=$3
shift 3
[ $# -gt 0 ] || set -- 0.6 0.8 1.0 1.2 1.4
mkdir -p "$out"
for alpha in "$@"; do
  transduce translate --model "$model" --input "$data/dev.src.txt" --output "$out/dev-$alpha.hyp" \
    --alpha "$alpha"
  echo "alpha $alpha: $(transduce evaluate --hyp "$out/dev-$alpha.hyp" \
    --ref "$data/dev.tgt.txt" --lowercase-tokenized | head -1)"
done | tee "$out/dev-alphas.txt"

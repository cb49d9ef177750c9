#!/usr/bin/env bash
# Back-translation (Sennrich et al. 2016; sampled, Edunov et al. 2018) where it pays: little
# parallel data and more text of the target language. Multi30k (`tok`) en->de: the first PAIRS
# pairs of the training set as the parallel corpus, the German of the rest as monolingual text.
# A de->en `tiny` trained on the pairs translates that German back into English, by sampling
# (`translate --sampling`: from the whole distribution, and from the 10 likeliest tokens at each
# step) and by beam search; en->de is then trained on the pairs alone and on
# the pairs with each synthetic corpus, the same settings and UPDATES each (a count, not a time:
# the arms compare alike on a host that is busy with other work), and scored on test_2016_flickr
# (lowercased, tokenized BLEU). The de->en model trains for MINUTES.
#
#   benchmarks/runs/backtranslation/s58-bt.sh OUT [MINUTES] [UPDATES] [PAIRS]   # 15, 1000, 5000
#
# A step whose output exists is not run again: the script continues where it stopped.
# One 4,000-piece BPE (small, for a small corpus), learned on the pairs' two sides, encodes
# everything (`--vocab`).
# Every run takes `demo`'s schedule (peak 0.005 after 200 updates, cooled over the last 20%, the
# newest checkpoint as the model, alpha 1.4) with `tiny`'s dropout 0.3.
set -euo pipefail
out=$1 minutes=${2:-15} updates=${3:-1000} pairs=${4:-5000}
data_dir=${TRANSDUCE_DATA:-../shared/data}
tok=$data_dir/multi30k/tok
mkdir -p "$out/text"
text() { zcat "$tok/$1.lc.norm.tok.$2.gz"; }
t=$out/text
if [ ! -e "$t/mono.de" ]; then
  for lang in en de; do
    text train $lang | sed -n "1,${pairs}p" > "$t/pairs.$lang"
    text val $lang > "$t/dev.$lang"
    text test_2016_flickr $lang > "$t/test.$lang"
  done
  text train de | sed -n "$((pairs + 1)),\$p" > "$t/mono.de"
fi
prepare() {  # name src tgt train-src train-tgt [vocab options...]
  local name=$1 src=$2 tgt=$3 train_src=$4 train_tgt=$5
  shift 5
  [ -e "$out/data-$name/data.json" ] && return
  transduce prepare files --src "$src" --tgt "$tgt" --tokenized --out "$out/data-$name" \
    --train-src "$train_src" --train-tgt "$train_tgt" \
    --dev-src "$t/dev.$src" --dev-tgt "$t/dev.$tgt" \
    --test-src "$t/test.$src" --test-tgt "$t/test.$tgt" "$@"
}
same=(train.warmup_steps=200 train.lr_scale=0.8 train.average_last=1 train.valid_every=250
      train.late_dropout=0 decode.alpha=1.4 model.dropout=0.3)
train() {  # run data budget...
  local run=$1 data=$2
  shift 2
  [ -e "$out/$run/average.pt" ] && return
  transduce train --data "$out/data-$data" --preset demo --out "$out/$run" "$@" \
    --set "${same[@]}" > "$out/$run.log" 2>&1
}
score() {  # run data
  grep -q "^$1:" "$out/scores.txt" 2>/dev/null && return
  transduce translate --model "$out/$1" --input "$out/data-$2/test.src.txt" \
    --output "$out/$1.test.hyp"
  echo "$1: $(transduce evaluate --hyp "$out/$1.test.hyp" --ref "$out/data-$2/test.tgt.txt" \
    --lowercase-tokenized | head -1)" | tee -a "$out/scores.txt"
}

prepare ende en de "$t/pairs.en" "$t/pairs.de" --vocab-size 4000
prepare deen de en "$t/pairs.de" "$t/pairs.en" --vocab "$out/data-ende"
train deen deen --max-minutes "$minutes" --max-steps 1000000
score deen deen
train ende ende --max-steps "$updates"
score ende ende

# the German back into English: a sample of the model's distribution, and its beam's best
back() {  # name translate-options...
  local name=$1
  shift
  [ -e "$t/$name.en" ] && return
  /usr/bin/time -f "$name: %e s" -a -o "$out/times.txt" \
    transduce translate --model "$out/deen" --input "$t/mono.de" --output "$t/$name.en" "$@"
}
back sampled --sampling --seed 1
back top10 --sampling --top-k 10 --seed 1
back beam
for kind in sampled top10 beam; do
  cat "$t/pairs.en" "$t/$kind.en" > "$t/with-$kind.en"
  cat "$t/pairs.de" "$t/mono.de" > "$t/with-$kind.de"
  prepare "ende-$kind" en de "$t/with-$kind.en" "$t/with-$kind.de" --vocab "$out/data-ende"
  train "ende-$kind" "ende-$kind" --max-steps "$updates"
  score "ende-$kind" "ende-$kind"
done

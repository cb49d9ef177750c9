#!/usr/bin/env bash
# Fine-tuning (`prepare --vocab`, `train --init`) where it pays: a small corpus of a new language
# pair, started from a model of a related pair. Multi30k (`tok`): `tiny` trained on en->de for
# PRE minutes, then en->fr on 2,900 pairs (a tenth of its corpus) for MINUTES, once from that
# model and once from scratch, with the same settings but for the first weights; each scored on
# test_2016_flickr (lowercased, tokenized BLEU), as is the en->de model itself; and from scratch
# once more for PRE + MINUTES, the fine-tuned run's whole cost.
#
#   benchmarks/runs/finetune/s57-transfer.sh OUT [PRE] [MINUTES]    # defaults 20 and 10
#
# One vocabulary for the three languages: a 10,000-piece BPE trained on en->de and en->fr
# together, with which every corpus here is encoded (`--vocab`). The en->fr runs take `demo`'s
# schedule for ten minutes (peak 0.005 after 200 updates, the rate cooled over the last 20%, the
# newest checkpoint as the model, alpha 1.4) with `tiny`'s dropout 0.3 from the start: 2,900
# pairs are ~60 epochs in ten minutes.
set -euo pipefail
out=$1 pre=${2:-20} minutes=${3:-10}
data_dir=${TRANSDUCE_DATA:-../shared/data}
tok=$data_dir/multi30k/tok
mkdir -p "$out/text"
text() { zcat "$tok/$1.lc.norm.tok.$2.gz"; }
# the joint vocabulary's corpus: en->de and en->fr, one after the other
{ text train en; text train en; } > "$out/text/joint.en"
{ text train de; text train fr; } > "$out/text/joint.xx"
for lang in en fr; do
  text train $lang | sed -n 1,2900p > "$out/text/small.$lang"
  text val $lang > "$out/text/dev.$lang"
  text test_2016_flickr $lang > "$out/text/test.$lang"
done
text val de > "$out/text/dev.de"
transduce prepare files --src en --tgt xx --tokenized --vocab-size 10000 --out "$out/joint" \
  --train-src "$out/text/joint.en" --train-tgt "$out/text/joint.xx" \
  --dev-src "$out/text/dev.en" --dev-tgt "$out/text/dev.de"
transduce prepare multi30k --src en --tgt de --variant tok --data-dir "$data_dir" \
  --vocab "$out/joint" --out "$out/ende"
transduce prepare files --src en --tgt fr --tokenized --vocab "$out/joint" --out "$out/enfr-small" \
  --train-src "$out/text/small.en" --train-tgt "$out/text/small.fr" \
  --dev-src "$out/text/dev.en" --dev-tgt "$out/text/dev.fr" \
  --test-src "$out/text/test.en" --test-tgt "$out/text/test.fr"

transduce train --data "$out/ende" --preset tiny --out "$out/ende-tiny" --max-minutes "$pre" \
  --max-steps 1000000 > "$out/ende-tiny.log" 2>&1
# demo's schedule and decoding, tiny's dropout from the start: the same for both runs
same=(train.warmup_steps=200 train.lr_scale=0.8 train.average_last=1 train.valid_every=250
      train.late_dropout=0 decode.alpha=1.4 model.dropout=0.3)
transduce train --data "$out/enfr-small" --init "$out/ende-tiny" --out "$out/enfr-fine-tuned" \
  --max-minutes "$minutes" --max-steps 1000000 --set "${same[@]}" > "$out/enfr-fine-tuned.log" 2>&1
transduce train --data "$out/enfr-small" --preset demo --out "$out/enfr-scratch" \
  --max-minutes "$minutes" --max-steps 1000000 --set "${same[@]}" > "$out/enfr-scratch.log" 2>&1
# from scratch again, given the fine-tuned run's whole time: its starting model's minutes too
total=$(awk "BEGIN { print $pre + $minutes }")
transduce train --data "$out/enfr-small" --preset demo --out "$out/enfr-scratch-total" \
  --max-minutes "$total" --max-steps 1000000 --set "${same[@]}" > "$out/enfr-scratch-total.log" 2>&1

score() {  # run, data
  transduce translate --model "$out/$1" --input "$out/$2/test.src.txt" --output "$out/$1.test.hyp"
  echo "$1: $(transduce evaluate --hyp "$out/$1.test.hyp" --ref "$out/$2/test.tgt.txt" \
    --lowercase-tokenized | head -1)" | tee -a "$out/scores.txt"
}
score ende-tiny ende
score enfr-fine-tuned enfr-small
score enfr-scratch enfr-small
score enfr-scratch-total enfr-small

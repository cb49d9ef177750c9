#!/usr/bin/env bash
# Tagged back-translation (Caswell et al. 2019), a probe: session 58's 24,000 German sentences
# back-translated by beam search (`s58-bt.sh`'s `beam.en`), each synthetic source marked by a tag
# word at its start, so that the model can tell synthetic sources from real ones; real and test
# sources carry none. Caswell et al. found the tag worth most for beam search's outputs, whose
# regularity otherwise teaches the model to translate like a back-translator.
#
#   benchmarks/runs/backtranslation/s59-tagged.sh OUT S58_OUT [UPDATES]   # 1000, as s58-bt.sh
#
# The tag is a word of letters the vocabulary has ("bttag": a few pieces, always the same), not a
# reserved symbol: `prepare` has no reserved tags, and session 58's vocabulary (`--vocab`) is
# kept so that the arms differ in the tag alone. The same settings and updates as s58-bt.sh.
set -euo pipefail
out=$1 s58=$2 updates=${3:-1000}
t=$s58/text
mkdir -p "$out"
sed 's/^/bttag /' "$t/beam.en" | cat "$t/pairs.en" - > "$out/with-tagged.en"
cat "$t/pairs.de" "$t/mono.de" > "$out/with-tagged.de"
[ -e "$out/data/data.json" ] || transduce prepare files --src en --tgt de --tokenized \
  --out "$out/data" --train-src "$out/with-tagged.en" --train-tgt "$out/with-tagged.de" \
  --dev-src "$t/dev.en" --dev-tgt "$t/dev.de" --test-src "$t/test.en" --test-tgt "$t/test.de" \
  --vocab "$s58/data-ende"
same=(train.warmup_steps=200 train.lr_scale=0.8 train.average_last=1 train.valid_every=250
      train.late_dropout=0 decode.alpha=1.4 model.dropout=0.3)
[ -e "$out/run/average.pt" ] || transduce train --data "$out/data" --preset demo \
  --out "$out/run" --max-steps "$updates" --set "${same[@]}" > "$out/run.log" 2>&1
transduce translate --model "$out/run" --input "$out/data/test.src.txt" --output "$out/test.hyp"
echo "ende-beam-tagged: $(transduce evaluate --hyp "$out/test.hyp" \
  --ref "$out/data/test.tgt.txt" --lowercase-tokenized | head -1)" | tee "$out/scores.txt"

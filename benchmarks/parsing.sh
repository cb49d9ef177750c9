#!/usr/bin/env bash
# Train a parser for a bounded time and score the test set with EVALB's rules, through the CLI.
#
#   benchmarks/parsing.sh MINUTES OUT [PRESET] [TRAIN_FRACTION] [VOCAB]
#   e.g. benchmarks/parsing.sh 20 bench/parse-tiny-100 parse-tiny 1.0 8000
#
# Reads the treebank from $TRANSDUCE_DATA (default ../shared/data): the full WSJ in wsj/ if there,
# else the NLTK sample. POS tags are written XX as Vinyals et al. and the paper (TAGS=--tags keeps
# them) and the gold tags are put back before EVALB scores. Writes OUT/summary.json: wall times, updates, best dev F1 (greedy, as
# validated), test F1 with beam 21 / alpha 0.3 (EVALB, COLLINS.prm), repaired outputs, and test F1
# of the same search constrained to trees over the input (`parse --constrained`).
set -euo pipefail
minutes=$1 out=$2 preset=${3:-parse-tiny} fraction=${4:-1.0} vocab=${5:-8000}
data_dir=${TRANSDUCE_DATA:-../shared/data}
mkdir -p "$out"
t0=$(date +%s)
transduce prepare ptb --data-dir "$data_dir" --out "$out/data" --vocab-size "$vocab" \
  --train-fraction "$fraction" ${TAGS:---no-tags}
t1=$(date +%s)
resume=$([ -d "$out/run/checkpoints" ] && echo --resume || true)  # a killed run goes on
[ -f "$out/run/average.pt" ] ||  # a finished run is not trained again
  transduce train --data "$out/data" --preset "$preset" --out "$out/run" --max-minutes "$minutes" \
    --max-steps 1000000 $resume ${TRAIN_ARGS:-}
t2=$(date +%s)
transduce parse --model "$out/run" --input "$out/data/test.src.txt" --output "$out/test.parsed" \
  2> "$out/parse.log"
t3=$(date +%s)
transduce evaluate --task parse --hyp "$out/test.parsed" --ref "$out/data/test.trees.txt" \
  | tee "$out/evalb.txt"
# With predicted tags EVALB drops a sentence whose punctuation tags differ (an error sentence);
# the gold tags give every sentence a score. Dev, scored so, is what picks between settings.
transduce evaluate --task parse --gold-tags --hyp "$out/test.parsed" \
  --ref "$out/data/test.trees.txt" > "$out/evalb-gold-tags.txt"
transduce parse --model "$out/run" --input "$out/data/test.src.txt" --constrained \
  --output "$out/test.constrained.parsed" 2> "$out/parse-constrained.log"
transduce evaluate --task parse --gold-tags --hyp "$out/test.constrained.parsed" \
  --ref "$out/data/test.trees.txt" > "$out/evalb-constrained.txt"
transduce parse --model "$out/run" --input "$out/data/dev.src.txt" --output "$out/dev.parsed" \
  2> "$out/parse-dev.log"
transduce evaluate --task parse --gold-tags --hyp "$out/dev.parsed" \
  --ref "$out/data/dev.trees.txt" > "$out/dev-evalb-gold-tags.txt"
python - "$out" "$preset" "$fraction" $((t1 - t0)) $((t2 - t1)) $((t3 - t2)) <<'PY'
import json, re, subprocess, sys
from pathlib import Path
out, preset, fraction = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
prep, _, parse = map(int, sys.argv[4:])
log = [json.loads(l) for l in (out / "run/log.jsonl").read_text().splitlines()]
valid = [r for r in log if r["kind"] == "valid"]
report = (out / "evalb.txt").read_text()
numbers = re.findall(r"Bracketing FMeasure\s*=\s*(\S+)", report)
errors = re.findall(r"Number of Error sentence\s*=\s*(\d+)", report)
gold = re.findall(r"Bracketing FMeasure\s*=\s*(\S+)", (out / "evalb-gold-tags.txt").read_text())
dev = re.findall(r"Bracketing FMeasure\s*=\s*(\S+)", (out / "dev-evalb-gold-tags.txt").read_text())
constrained = re.findall(r"Bracketing FMeasure\s*=\s*(\S+)", (out / "evalb-constrained.txt").read_text())
tags = json.loads((out / "data/meta.json").read_text())["task"]["tags"]
repaired = re.search(r"(\d+) of (\d+) outputs were repaired", (out / "parse.log").read_text())
cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
summary = {
    "preset": preset,
    "pos_tags": "predicted" if tags else "XX",
    "train_fraction": fraction,
    "train_trees": int(json.loads((out / "data/meta.json").read_text())["splits"]["train"]["pairs"]),
    # Training's own clock (log.jsonl), summed over resumed sessions (this call's t2 - t1 counts
    # only its own part); it runs on while the CPU is shared or the run stopped, so it is the
    # time a run took here, not a measure of speed.
    "wall_seconds": {"prepare": prep, "train": round(valid[-1]["elapsed"]), "parse_beam21": parse},
    "updates": valid[-1]["step"],
    "best_dev_f1_greedy": max(r.get("f1", 0) for r in valid),
    "test_f1_all": float(numbers[0]),
    "test_f1_len40": float(numbers[1]),
    "test_error_sentences": int(errors[0]),
    "test_f1_gold_tags_all": float(gold[0]),
    "test_f1_gold_tags_len40": float(gold[1]),
    "dev_f1_gold_tags_beam21": float(dev[0]),
    "test_f1_constrained_all": float(constrained[0]),
    "test_f1_constrained_len40": float(constrained[1]),
    "repaired": f"{repaired.group(1)} of {repaired.group(2)}" if repaired else None,
    "machine": f"{cpu}, {subprocess.check_output(['nproc']).decode().strip()} cores",
}
(out / "summary.json").write_text(json.dumps(summary, indent=2))
print(json.dumps(summary, indent=2))
PY

#!/usr/bin/env bash
# Train a preset (`tiny` unless $PRESET names another) for a bounded time and score the test
# set, through the CLI a user runs.
#
#   benchmarks/translation.sh CORPUS SRC TGT VARIANT MINUTES OUT [TEST_SPLIT]
#   e.g. benchmarks/translation.sh multi30k en de tok 60 bench/multi30k-en-de-tok
#
# Reads the corpora from $TRANSDUCE_DATA (default ../shared/data); the joint BPE has $VOCAB_SIZE
# pieces (default 10000); $TRAIN_ARGS adds training settings (--set k=v ...). Writes
# OUT/summary.json with the wall times, training tokens/s (from the run's log) and BLEU
# (sacreBLEU and lowercased tokenized).
set -euo pipefail
corpus=$1 src=$2 tgt=$3 variant=$4 minutes=$5 out=$6 split=${7:-test}
data_dir=${TRANSDUCE_DATA:-../shared/data}
mkdir -p "$out"
t0=$(date +%s)
transduce prepare "$corpus" --src "$src" --tgt "$tgt" --variant "$variant" --data-dir "$data_dir" \
  --vocab-size "${VOCAB_SIZE:-10000}" --out "$out/data"
t1=$(date +%s)
transduce train --data "$out/data" --preset "${PRESET:-tiny}" --out "$out/run" \
  --max-minutes "$minutes" --max-steps 1000000 ${TRAIN_ARGS:-}
t2=$(date +%s)
transduce translate --model "$out/run" --input "$out/data/$split.src.txt" --output "$out/$split.hyp"
t3=$(date +%s)
transduce evaluate --hyp "$out/$split.hyp" --ref "$out/data/$split.tgt.txt" | tee "$out/sacrebleu.txt"
transduce evaluate --hyp "$out/$split.hyp" --ref "$out/data/$split.tgt.txt" --lowercase-tokenized \
  | tee "$out/bleu-lc-tok.txt"
python - "$out" "$split" $((t1 - t0)) $((t2 - t1)) $((t3 - t2)) <<'PY'
import json, platform, subprocess, sys
from pathlib import Path
out, split, prep, train, translate = Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:])
log = [json.loads(l) for l in (out / "run/log.jsonl").read_text().splitlines()]
steps = [r for r in log if r["kind"] == "train"]
valid = [r for r in log if r["kind"] == "valid"]
cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
summary = {
    "split": split,
    "wall_seconds": {"prepare": prep, "train": train, "translate_beam4": translate},
    "updates": valid[-1]["step"],
    "train_tgt_tokens_per_s_median": sorted(r["tgt_tokens_per_s"] for r in steps)[len(steps) // 2],
    "best_dev_bleu_greedy": max(r.get("bleu", 0) for r in valid),
    "sacrebleu": (out / "sacrebleu.txt").read_text().splitlines()[0],
    "bleu_lowercase_tokenized": (out / "bleu-lc-tok.txt").read_text().splitlines()[0],
    "machine": f"{cpu}, {subprocess.check_output(['nproc']).decode().strip()} cores",
    "torch": __import__("torch").__version__,
    "python": platform.python_version(),
}
(out / "summary.json").write_text(json.dumps(summary, indent=2))
print(json.dumps(summary, indent=2))
PY

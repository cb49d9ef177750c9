#!/usr/bin/env bash
# Train a preset (`tiny` unless $PRESET names another) for a bounded time and score the test
# set, through the CLI a user runs.
#
#   benchmarks/translation.sh CORPUS SRC TGT VARIANT MINUTES OUT [TEST_SPLIT]
#   e.g. benchmarks/translation.sh multi30k en de tok 60 bench/multi30k-en-de-tok
#
# Reads the corpora from $TRANSDUCE_DATA (default ../shared/data); the joint BPE has $VOCAB_SIZE
# pieces (default 10000); $TRAIN_ARGS adds training settings (--set k=v ...; `--members 2`
# trains an ensemble, whose members are then scored one by one too). Writes OUT/summary.json with
# the wall times, training tokens/s (from the runs' logs) and BLEU (sacreBLEU and lowercased
# tokenized).
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
for member in "$out"/run/member*/; do  # an ensemble's (train --members): each alone too
  [ -d "$member" ] || continue
  name=$(basename "$member")
  transduce translate --model "$member" --input "$out/data/$split.src.txt" \
    --output "$out/$split.$name.hyp"
  transduce evaluate --hyp "$out/$split.$name.hyp" --ref "$out/data/$split.tgt.txt" \
    --lowercase-tokenized | tee "$out/bleu-lc-tok.$name.txt"
done
python - "$out" "$split" $((t1 - t0)) $((t2 - t1)) $((t3 - t2)) <<'PY'
import json, platform, subprocess, sys
from pathlib import Path
out, split, prep, train, translate = Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:])
members = out / "run/members.json"
names = json.loads(members.read_text())["members"] if members.exists() else []
runs = [out / "run" / name for name in names] or [out / "run"]
logs = [[json.loads(l) for l in (run / "log.jsonl").read_text().splitlines()] for run in runs]
steps = [r for log in logs for r in log if r["kind"] == "train"]
valid = [r for r in logs[0] if r["kind"] == "valid"]
cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
summary = {
    "split": split,
    "wall_seconds": {"prepare": prep, "train": train, "translate_beam4": translate},
    "updates": valid[-1]["step"],
    "train_tgt_tokens_per_s_median": sorted(r["tgt_tokens_per_s"] for r in steps)[len(steps) // 2],
    "best_dev_bleu_greedy": max(r.get("bleu", 0) for r in valid),
    "sacrebleu": (out / "sacrebleu.txt").read_text().splitlines()[0],
    "bleu_lowercase_tokenized": (out / "bleu-lc-tok.txt").read_text().splitlines()[0],
    "members": [
        {
            "name": name,
            "updates": [r for r in log if r["kind"] == "valid"][-1]["step"],
            "bleu_lowercase_tokenized": (out / f"bleu-lc-tok.{name}.txt").read_text().split("\n")[0],
        }
        for name, log in zip(names, logs)
    ],
    "machine": f"{cpu}, {subprocess.check_output(['nproc']).decode().strip()} cores",
    "torch": __import__("torch").__version__,
    "python": platform.python_version(),
}
(out / "summary.json").write_text(json.dumps(summary, indent=2))
print(json.dumps(summary, indent=2))
PY

#!/usr/bin/env bash
# Session 29's call of the `device` tool (issue 17, target 5): attention over an unpadded source
# without a mask (the flash kernel), on synthetic pairs with WMT14 en-de's lengths at WMT14's own
# size (4.5M pairs: at 100,000, every 25,000-token batch pads its sources; at 4.5M, 29% do), and
# batches of one source length each (data.one_source_length: none do). Each run first in a
# process of its own (20 updates of warm-up, 25 timed, new shapes). The call ran out of its 570 s
# at `base-one-source-length`; `big-mask-when-padded` and `big-one-source-length` ran out of their
# 110 s, and the latter was run again alone with 230 s (SPEED.md, session 29).
#     bash benchmarks/runs/speed/gpu/s29-device.sh     # results in $OUT or /tmp/gpu-s29
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-s29}
PAIRS=${PAIRS:-4500000}
PRESETS=${PRESETS:-"big base"}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
WMT=$(mktemp -d)/wmt
python3 benchmarks/wmt_lengths.py "$WMT" --pairs "$PAIRS" >/dev/null
echo "[synthesised $PAIRS pairs, $(($(date +%s) - start)) s]"
SPEED_DATA="--prepared $WMT"
source benchmarks/runs/speed/gpu/s28-speed.sh  # speed NAME SECONDS ARGS...
for preset in $PRESETS; do
    speed "$preset-mask-always" 110 --presets "$preset" --source-mask always
    speed "$preset-mask-when-padded" 110 --presets "$preset" --source-mask when-padded
    speed "$preset-one-source-length" 110 --presets "$preset" --one-source-length \
        --source-mask when-padded
done
echo "[done, $(($(date +%s) - start)) s]"

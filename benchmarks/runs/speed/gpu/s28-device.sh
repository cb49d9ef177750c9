#!/usr/bin/env bash
# Session 28's GPU check (issue 17, target 5), the first call of the `device` tool: `base` and
# `big` bf16 training at WMT lengths on new batch shapes (20 updates of warm-up, 25 timed), with
# attention's projections of one input as one product of the stacked weights (the Trainer's now)
# against one product per layer (`--stacked-products off`, the update before), each preset first
# in a process of its own with an Inductor cache of its own; `base` stacked with a profile of 5
# updates (the kernels by their own GPU time); then the GPU tests not yet run on a GPU.
#     bash benchmarks/runs/speed/gpu/s28-device.sh     # results in $OUT or /tmp/gpu-s28
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-s28}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"

source benchmarks/runs/speed/gpu/s28-speed.sh  # speed NAME SECONDS ARGS...
speed base-stacked 130 --presets base --profile
speed base-apart 110 --presets base --stacked-products off
speed big-stacked 120 --presets big
speed big-apart 120 --presets big --stacked-products off
if (($(date +%s) - start < 480)); then
    timeout 90 python3 -m pytest -q -rs -p no:cacheprovider tests/test_compiled.py \
        tests/test_attention.py tests/test_loss.py -k "gpu or cuda" 2>&1 | tail -3
fi
echo "[done, $(($(date +%s) - start)) s]"

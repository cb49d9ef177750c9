#!/usr/bin/env bash
# Issue 17's GPU checks in one call of the `device` tool (about 8-9 minutes on an H200 with a cold
# Inductor cache): every test that needs a GPU, then the training update's speed at WMT lengths,
# the model's attention kernels against cuDNN's, and a profile of `big` on new batch shapes.
#     bash benchmarks/gpu_check.sh        # results in $OUT (the device tool's) or /tmp/gpu-check
# Each speed run gets an Inductor cache of its own: a compiled graph keeps the attention kernel it
# was first traced with, and a shared cache handed one run's graphs to the next (SPEED.md, GPU).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/test_attention.py \
    tests/test_batching.py tests/test_wiring.py tests/test_compiled.py tests/test_loss.py 2>&1 |
    tail -6

speed() {
    local name=$1 seconds=$2
    shift 2
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout "$seconds" python3 benchmarks/speed_gpu.py \
        --wmt-lengths --out "$OUT/$name.json" "$@" 2>&1 | grep -v "warn\|^$" >"$OUT/$name.log"
    grep -E "^(base|big)  |Error" "$OUT/$name.log"
}
speed gpu-wmt 160 --presets base big --updates 60 --warmup 25
speed gpu-wmt-cudnn 160 --presets base big --updates 60 --warmup 25 --sdpa cudnn
speed gpu-big-fresh 110 --presets big --updates 26 --warmup 20 --profile-fresh

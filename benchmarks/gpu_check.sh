#!/usr/bin/env bash
# Issue 17's GPU checks in one call of the `device` tool (7.4 minutes on an H200 in session 24,
# Inductor's cache cold): every test that needs a GPU, then the training update's speed at WMT
# lengths: on new batch shapes with the model's attention kernels and with cuDNN's, on shapes seen
# in the warm-up, and the same replayed as CUDA graphs (speed_gpu.py --cuda-graphs, an experiment:
# two untimed passes over the shapes, since Inductor records a shape on its second call).
#     bash benchmarks/gpu_check.sh        # results in $OUT (the device tool's) or /tmp/gpu-check
# cuDNN's run gets an Inductor cache of its own: a compiled graph keeps the attention kernel it
# was first traced with, and a shared cache handed one run's graphs to the next (SPEED.md, GPU).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
# The tests that need a GPU, then the compiled layers' (with the first, 55 s on an H200).
timeout 120 python3 -m pytest -q -rs -p no:cacheprovider tests/test_attention.py \
    tests/test_batching.py tests/test_wiring.py -k gpu 2>&1 | tail -3
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_compiled.py 2>&1 | tail -1

MODEL_KERNELS_CACHE=$(mktemp -d)
speed() {
    local name=$1 seconds=$2 cache=$3
    shift 3
    TORCHINDUCTOR_CACHE_DIR=$cache timeout "$seconds" python3 benchmarks/speed_gpu.py \
        --wmt-lengths --out "$OUT/$name.json" "$@" 2>&1 | grep -v "warn\|^$" >"$OUT/$name.log"
    grep -E "^(base|big)  |Error|rror:" "$OUT/$name.log" | head -8
}
# New shapes: 30 timed updates after 20 of warm-up, each batch the next of the epoch.
speed gpu-wmt 130 "$MODEL_KERNELS_CACHE" --presets base big --updates 50 --warmup 20
# Shapes seen: the 25 timed updates repeat the 25 of the warm-up.
speed gpu-wmt-seen 90 "$MODEL_KERNELS_CACHE" --presets base big --updates 50 --warmup 25 \
    --seen-shapes
TORCH_LOGS=perf_hints,cudagraphs speed gpu-wmt-graphs 180 "$MODEL_KERNELS_CACHE" \
    --presets base big --updates 50 --warmup 25 --seen-shapes --cuda-graphs
grep -ic "recording cudagraph" "$OUT/gpu-wmt-graphs.log"  # graphs recorded, both presets
grep -i "skipping cudagraph" "$OUT/gpu-wmt-graphs.log" | sort | uniq -c | head -5
speed gpu-wmt-cudnn 130 "$(mktemp -d)" --presets base big --updates 50 --warmup 20 --sdpa cudnn

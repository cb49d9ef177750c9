#!/usr/bin/env bash
# For the next session lent a GPU (issue 17, target 5): why `big` on batches of one source length,
# attended without a mask (the flash kernel), took 1.47 s an update against 88 ms masked on an
# H200 in session 29, while `base` was level. Recompilations and graph breaks logged, then the
# same run profiled (the kernels by their own GPU time, and the host's), 2M synthetic pairs.
#     bash benchmarks/runs/speed/gpu/s29-next.sh     # results in $OUT or /tmp/gpu-s29-next
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-s29-next}
mkdir -p "$OUT"
start=$(date +%s)
WMT=$(mktemp -d)/wmt
python3 benchmarks/wmt_lengths.py "$WMT" --pairs 2000000 >/dev/null
echo "[synthesised, $(($(date +%s) - start)) s]"
TORCH_LOGS=recompiles,graph_breaks TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout 200 \
    python3 benchmarks/speed_gpu.py --prepared "$WMT" --updates 30 --warmup 20 --presets big \
    --one-source-length --source-mask when-padded --profile --out "$OUT/big-one.json" \
    >"$OUT/big-one.log" 2>&1
echo "[big, $(($(date +%s) - start)) s]"
grep -c "Recompiling" "$OUT/big-one.log"
grep -E "^big |rror|triggered by|- [0-9]+/[0-9]+:" "$OUT/big-one.log" | sort | uniq -c |
    sort -rn | head -20 | cut -c1-300

#!/usr/bin/env bash
# Session 27's second GPU call (issue 17, target 5): the loss in compiled chunks
# (training/loss.py `_chunked_compiled`) against the whole logits, with every attention on the
# memory-efficient kernel (the first call's gain for `big`), and today's kernels; `base` first
# in each process (a preset run second in one process meets the first one's compiled graphs and
# its guards: `base`, bound by the host, ran 1.2-1.7x slower that way in the first call).
#     bash benchmarks/runs/speed/gpu/s27-device-2.sh     # results in $OUT or /tmp/gpu-s27-2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-s27-2}
mkdir -p "$OUT"
start=$(date +%s)
speed() {
    local name=$1 seconds=$2
    shift 2
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout "$seconds" python3 benchmarks/speed_gpu.py \
        --wmt-lengths --updates 42 --warmup 20 --presets base big --out "$OUT/$name.json" "$@" \
        2>&1 | grep -v "warn\|^$" >"$OUT/$name.log"
    echo "[$name, $(($(date +%s) - start)) s]"
    grep -E "^(base|big)  |rror" "$OUT/$name.log" | cut -c1-230 | head -4
}
speed efficient-chunked 95 --sdpa efficient
speed efficient-logits 95 --sdpa efficient --loss-form logits
if (($(date +%s) - start < 160)); then
    speed today 85 --loss-form logits
fi
echo "[done, $(($(date +%s) - start)) s]"

#!/usr/bin/env bash
# For the next session lent a GPU (issue 17, target 5), after session 30 found on the CPU that the
# compiled layers recompile nothing per shape without the mask: first the pieces (attention alone,
# then one encoder and one decoder layer of `base` and `big`, eager and compiled, with and
# without the mask; ~3 min), then session 29's whole-run profile of `big` (~4 min).
#     bash benchmarks/runs/speed/gpu/s30-next.sh     # results in $OUT or /tmp/gpu-s30-next
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-s30-next}
mkdir -p "$OUT"
start=$(date +%s)
TORCH_LOGS=recompiles TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout 240 \
    python3 benchmarks/runs/speed/gpu/s30-attention-probe.py >"$OUT/probe.log" 2>&1
echo "[probe, $(($(date +%s) - start)) s]"
grep -E "^(sdpa|layers|NVIDIA)" "$OUT/probe.log"
grep -c "Recompiling" "$OUT/probe.log"
OUT="$OUT" bash benchmarks/runs/speed/gpu/s29-next.sh

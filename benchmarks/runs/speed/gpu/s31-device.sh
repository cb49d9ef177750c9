#!/usr/bin/env bash
# Session 31's call of the `device` tool (issue 17, target 5), after the session's first call
# (s30-next.sh) showed a graph break in every compiled decoder layer: over dynamic shapes,
# `is_causal = x.size(1) > 1` was a SymBool, which `scaled_dot_product_attention` refuses.
# With it fixed: `big` and `base`, mask always (the Trainer's) and batches of one source length
# without a mask, each in a process of its own (20 updates of warm-up, 25 timed, new shapes) on
# 2M synthetic pairs of WMT lengths; then the layer probe again, recompilations logged.
#     bash benchmarks/runs/speed/gpu/s31-device.sh     # results in $OUT or /tmp/gpu-s31
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s31
pairs 2000000
for preset in big base; do
    speed "$preset-mask-always" 95 --presets "$preset" --source-mask always
    speed "$preset-one-source-length" 95 --presets "$preset" --one-source-length \
        --source-mask when-padded
done
TORCH_LOGS=recompiles,graph_breaks TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout 110 \
    python3 benchmarks/runs/speed/gpu/s30-attention-probe.py >"$OUT/probe.log" 2>&1
echo "[probe, $(($(date +%s) - start)) s]"
grep -E "^layers" "$OUT/probe.log"
grep -c "Recompiling" "$OUT/probe.log"
grep -c "graph_breaks" "$OUT/probe.log"

#!/usr/bin/env bash
# Session 43, second call: the first call's profile of `big` (today's defaults) has the decoder's
# causal self-attention on flash at 2.2 ms a layer (backward 1.7 ms), against 0.76 ms for a
# non-causal one on the memory-efficient kernel: at WMT's ~30-token sentences flash's tiles are
# mostly waste. Every attention on the memory-efficient kernel (`--sdpa efficient`) against
# today's defaults, same machine; then `base` the same, if the call has time left.
#     bash benchmarks/runs/speed/gpu/s43-device-2.sh     # results in $OUT or /tmp/gpu-s43-2
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s43-2
export TORCH_LOGS=recompiles
pairs 4500000
speed big-efficient 100 --presets big --sdpa efficient
speed big-today 100 --presets big
if (($(date +%s) - start < 250)); then
    speed base-efficient 110 --presets base --sdpa efficient
fi
grep -c "Recompiling function" "$OUT"/*.log

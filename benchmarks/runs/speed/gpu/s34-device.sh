#!/usr/bin/env bash
# Session 34's one call on a lent GPU (issue 17, target 5), the budget being one call (~9 min):
# session 32's question for `big` (mask-free on the memory-efficient kernel against the Trainer's
# masked run, each in a process of its own, 2M WMT-like pairs) and `base`'s mask-free run on that
# kernel, then session 31's ceiling of CUDA graphs (`base` first: it is the host-bound one).
#     bash benchmarks/runs/speed/gpu/s34-device.sh     # results in $OUT or /tmp/gpu-s34
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s34
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
pairs 2000000
# (`--mixed-source-lengths` was speed_gpu.py's default when this ran; written out since.)
speed big-mask-always 95 --presets big --mixed-source-lengths --source-mask always
speed big-one-source-length-efficient 95 --presets big --one-source-length \
    --source-mask when-padded --sdpa efficient
speed base-one-source-length-efficient 95 --presets base --one-source-length \
    --source-mask when-padded --sdpa efficient
TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout 230 python3 \
    benchmarks/runs/speed/gpu/s31-graphs-probe.py --presets base big 2>&1 |
    grep -v "warn\|^$" | tee "$OUT/graphs-probe.log"
echo "[done, $(($(date +%s) - start)) s]"

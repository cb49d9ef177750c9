#!/usr/bin/env bash
# Session 34's third call (issue 17, target 5): what the first call's mask-free runs on the
# memory-efficient kernel are to be set against: each size masked with every attention on that
# kernel (`--sdpa efficient`), and `base` masked as the Trainer runs it today.
#     bash benchmarks/runs/speed/gpu/s34-device-3.sh     # results in $OUT or /tmp/gpu-s34-3
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s34-3
pairs 2000000
# (`--mixed-source-lengths` was speed_gpu.py's default when these ran; written out since.)
speed big-mask-always-efficient 95 --presets big --mixed-source-lengths --source-mask always \
    --sdpa efficient
speed base-mask-always 95 --presets base --mixed-source-lengths --source-mask always
speed base-mask-always-efficient 95 --presets base --mixed-source-lengths --source-mask always \
    --sdpa efficient
echo "[done, $(($(date +%s) - start)) s]"

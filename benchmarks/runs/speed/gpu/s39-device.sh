#!/usr/bin/env bash
# Session 39, second call (a fresh machine): does Inductor's coordinate-descent tuning of its
# Triton kernels (the layers' dropout, residual and LayerNorm, ~22% of `big`'s GPU time) close
# `big`'s last 1.2 points to 40%? Today's defaults as the baseline on the same machine, then the
# same with the tuning on (session 27's try ran out of its 90 s while compiling: 240 s here).
#     bash benchmarks/runs/speed/gpu/s39-device.sh     # results in $OUT or /tmp/gpu-s39
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s39
export TORCH_LOGS=recompiles
pairs 4500000
speed big-today 95 --presets big
speed big-tuned 240 --presets big --inductor coordinate_descent_tuning=True
grep -c "Recompiling function" "$OUT"/*.log

#!/usr/bin/env bash
# Session 28's second call of the `device` tool (issue 17, target 5): after the first call
# (s28-device.sh) found `base` waiting on the host (375 ms of host time against 204 ms of GPU
# time for 5 updates), `base` with Inductor's C++ wrapper (kernels launched from generated C++
# rather than Python), and `big` with the stacked projections and every attention on the
# memory-efficient kernel (session 27's best for `big`), each first in a process of its own.
#     bash benchmarks/runs/speed/gpu/s28-device-2.sh     # results in $OUT or /tmp/gpu-s28-2
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-s28-2}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

source benchmarks/runs/speed/gpu/s28-speed.sh  # speed NAME SECONDS ARGS...
speed big-stacked-efficient 120 --presets big --sdpa efficient
speed base-cpp-wrapper 200 --presets base --inductor cpp_wrapper=True
speed base-stacked 100 --presets base
echo "[done, $(($(date +%s) - start)) s]"

#!/usr/bin/env bash
# Session 43, one call: does Inductor's autotuning of the matrix products (`max_autotune_gemm`:
# Triton's templates timed against cuBLAS per shape, and the element-wise work that follows a
# product fused into the template's epilogue) close `big`'s last 1.3 points to 40%? Today's
# defaults as the baseline on the same machine first; then, if the call has time left, the
# profile of `big` on today's defaults (kernels by their own GPU time).
#     bash benchmarks/runs/speed/gpu/s43-device.sh     # results in $OUT or /tmp/gpu-s43
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s43
export TORCH_LOGS=recompiles
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
pairs 4500000
speed big-today 95 --presets big
speed big-autotune-gemm 300 --presets big --inductor max_autotune_gemm=True
if (($(date +%s) - start < 430)); then
    speed big-today-profile 110 --presets big --profile
    grep -A45 "Self CUDA" "$OUT/big-today-profile.log" | cut -c1-200 | head -60
fi
grep -c "Recompiling function" "$OUT"/*.log

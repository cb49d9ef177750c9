#!/usr/bin/env bash
# For the next session lent a GPU (~8 min, one call): session 43's autotuning log had cuBLASLt's
# bias epilogue (`bias_addmm`) at 0.6x the time of the `addmm` Inductor emits by default (the
# bias broadcast to 2-D), yet `max_autotune_gemm` with Triton's templates gained nothing whole.
# Autotuning among cuBLAS's own choices only (`max_autotune_gemm_backends=ATEN`: `addmm` or
# `bias_addmm` per product, seconds of warm-up, no Triton), against today's defaults on the same
# machine, `base` and `big`.
#     bash benchmarks/runs/speed/gpu/s44-next.sh     # results in $OUT or /tmp/gpu-s44
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s44
export TORCH_LOGS=recompiles
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
pairs 4500000
speed big-today 100 --presets big
speed big-bias-epilogue 150 --presets big \
    --inductor max_autotune_gemm=True max_autotune_gemm_backends=ATEN
speed base-today 100 --presets base
speed base-bias-epilogue 150 --presets base \
    --inductor max_autotune_gemm=True max_autotune_gemm_backends=ATEN
grep -c "Recompiling function" "$OUT"/*.log

#!/usr/bin/env bash
# Session 61, call 2 (~4 min): call 1 (s44-next.sh) had `base` at 1.27x with Inductor autotuning
# among cuBLAS's own products (`bias_addmm`, the bias in cuBLASLt's epilogue) and `big` level.
# Again on one machine, in the order A B A: is `base`'s gain the setting's or the host's? And the
# setting at twice the batch (50,000 target tokens an update).
#     bash benchmarks/runs/speed/gpu/s61-device.sh     # results in $OUT or /tmp/gpu-s61
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s61
export TORCH_LOGS=recompiles
pairs 4500000
EPILOGUE=(--inductor max_autotune_gemm=True max_autotune_gemm_backends=ATEN)
speed base-bias-epilogue-1 120 --presets base "${EPILOGUE[@]}"
speed base-today 100 --presets base
speed base-bias-epilogue-2 120 --presets base "${EPILOGUE[@]}"
speed base-bias-epilogue-50k 150 --presets base --max-tokens 50000 "${EPILOGUE[@]}"

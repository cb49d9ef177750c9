#!/usr/bin/env bash
# Session 34's second call (issue 17, target 5): where `base`'s GPU time goes (the Trainer's
# update, mask-free on the memory-efficient kernel, profiled by operator), and the ceiling of
# CUDA graphs for `base` at 50,000 target tokens a batch (twice the paper's 25,000).
#     bash benchmarks/runs/speed/gpu/s34-device-2.sh     # results in $OUT or /tmp/gpu-s34-2
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s34-2
TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout 150 python3 \
    benchmarks/runs/speed/gpu/s31-graphs-probe.py --presets base --tokens 50000 2>&1 |
    grep -v "warn\|^$" | tee "$OUT/graphs-probe-base-50k.log"
echo "[probe, $(($(date +%s) - start)) s]"
pairs 2000000
speed base-one-source-length-efficient-profile 130 --presets base --one-source-length \
    --source-mask when-padded --sdpa efficient --profile
echo "[done, $(($(date +%s) - start)) s]"

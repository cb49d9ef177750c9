#!/usr/bin/env bash
# For the next session lent a GPU (issue 17, target 5). Session 31 found on an H200 that without
# a mask the flash kernel takes 26% of `big`'s GPU time and is slower than the memory-efficient
# kernel with a mask (h = 16: 1.79 against 0.94 ms a call, forward and backward); yet `base` on
# batches of one source length, mask-free, was 1.19x its masked run. So: mask-free on the
# memory-efficient kernel (`--sdpa efficient`) beside the Trainer's masked runs, `big` and `base`,
# each in a process of its own (20 updates of warm-up, 25 timed, new shapes), 2M pairs (~7 min).
#     bash benchmarks/runs/speed/gpu/s32-next.sh     # results in $OUT or /tmp/gpu-s32
# Then, as a second call at once (the machine waits 30 s idle), the ceiling of CUDA graphs for
# `base` and `big` (~4 min): python3 benchmarks/runs/speed/gpu/s31-graphs-probe.py
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s32
pairs 2000000
for preset in big base; do
    speed "$preset-mask-always" 95 --presets "$preset" --source-mask always
    [ "$preset" = big ] &&  # session 27's best for `big`: every attention on that kernel, masked
        speed "$preset-mask-always-efficient" 95 --presets "$preset" --source-mask always \
            --sdpa efficient
    speed "$preset-one-source-length-efficient" 95 --presets "$preset" --one-source-length \
        --source-mask when-padded --sdpa efficient
done

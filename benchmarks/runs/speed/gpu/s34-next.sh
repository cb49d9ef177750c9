#!/usr/bin/env bash
# For the next session lent a GPU (issue 17, target 5): the GPU defaults session 34 set, measured
# whole against the ones before, each in a process of its own (20 updates of warm-up, 25 timed,
# new shapes; ~8 min). Today's: the paper's presets batch sources of one length, a GPU drops the
# mask of unpadded batches, unmasked non-causal attention may not take flash (so takes the
# memory-efficient kernel), causal self-attention may. Before: mixed lengths, the mask always.
# Session 34 measured the parts (SPEED.md); this measures the whole, on WMT14's 4.5M pairs' worth
# of WMT-like lengths (session 29 met `big` at 1.47 s an update mask-free on 4.5M; session 31,
# after fixing a graph break, 94 ms on 2M).
#     bash benchmarks/runs/speed/gpu/s34-next.sh     # results in $OUT or /tmp/gpu-s34-next
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s34-next
pairs 4500000
for preset in big base; do
    speed "$preset-today" 95 --presets "$preset"
    speed "$preset-before" 95 --presets "$preset" --mixed-source-lengths --source-mask always
done

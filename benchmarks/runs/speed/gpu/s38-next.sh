#!/usr/bin/env bash
# For the next session lent a GPU (issue 17, target 5), in place of s34-next.sh: today's GPU
# defaults against the ones before, each in a process of its own (20 updates of warm-up, 25
# timed, new shapes; ~8 min). Session 37 ran s34-next.sh and met ~10x the update's time in the
# "today" rows: one-source-length batches held a length's last few sentences (single sentences,
# batches of under 5,120 source tokens), whose new shapes failed the compiled layers' guards and
# recompiled them inside the timed updates. Those sentences now share the next length's batch;
# speed_gpu.py reports how many timed updates compiled, and the rate without them, and each
# run's log holds Dynamo's reasons for recompiling.
#     bash benchmarks/runs/speed/gpu/s38-next.sh     # results in $OUT or /tmp/gpu-s38-next
source benchmarks/runs/speed/gpu/s28-speed.sh  # begin OUT; pairs N; speed NAME SECONDS ARGS...
begin /tmp/gpu-s38-next
export TORCH_LOGS=recompiles
pairs 4500000
for preset in big base; do
    speed "$preset-today" 95 --presets "$preset"
    speed "$preset-before" 95 --presets "$preset" --mixed-source-lengths --source-mask always
done
grep -c "Recompiling function" "$OUT"/*.log

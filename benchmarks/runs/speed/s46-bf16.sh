#!/usr/bin/env bash
# Session 46: training's linear products in bfloat16 (train.precision=bf16) against float32 on a
# CPU with AMX, one process per trial, alternated (fp32 bf16 fp32 bf16 ...), three rounds a preset.
#   benchmarks/runs/speed/s46-bf16.sh PREPARED_DATA > benchmarks/runs/speed/s46-bf16-ab.txt
set -euo pipefail
data=$1
grep -m1 "model name" /proc/cpuinfo
python - <<'PEAK'  # the host's matrix peaks, 2 threads: a 2048^3 product, best of 10
import time, torch
torch.set_num_threads(2)
for dtype in (torch.float32, torch.bfloat16):
    a, b = torch.randn(2048, 2048, dtype=dtype), torch.randn(2048, 2048, dtype=dtype)
    best = min((lambda t: (a @ b, time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(10))
    print(f"{dtype}: {2 * 2048**3 / best / 1e9:.0f} GFLOP/s")
PEAK
for preset in tiny small "base data.max_tokens=4096"; do
  set -- $preset
  name=$1; shift
  updates=60; [ "$name" = base ] && updates=30
  for round in 1 2 3; do
    for precision in fp32 bf16; do
      echo "== $name $precision round $round"
      python benchmarks/train_step.py --prepared "$data" --preset "$name" --updates $updates \
        --set train.precision=$precision "$@" | head -n 1
    done
  done
done

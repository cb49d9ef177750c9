#!/usr/bin/env bash
# Session 37, second call: why s34-next.sh's "today" rows ran at ~10x the time of an update.
# big on today's defaults with Dynamo's recompilations and graph breaks logged, then s34's
# measured configuration (memory-efficient kernel for every call) on the same 4.5M pairs.
source benchmarks/runs/speed/gpu/s28-speed.sh
begin /tmp/gpu-s37
pairs 4500000
TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TORCH_LOGS=recompiles,graph_breaks timeout 100 python3 \
    benchmarks/speed_gpu.py $SPEED_DATA --updates 45 --warmup 20 --presets big \
    --out "$OUT/big-today-logged.json" >"$OUT/big-today-logged.log" 2>&1
echo "[big-today-logged, $(($(date +%s) - start)) s]"
grep -c "Recompiling" "$OUT/big-today-logged.log"
grep -A4 "Recompiling" "$OUT/big-today-logged.log" | grep -v "^\s*$" | cut -c1-200 | head -30
grep "^big " "$OUT/big-today-logged.log" | cut -c1-300
speed big-today-efficient 95 --presets big --sdpa efficient

#!/usr/bin/env bash
# Session 23's one GPU run (the `device` tool: `bash benchmarks/runs/speed/gpu/s23-device.sh`,
# results under $OUT): the update without host waits against the update as it was (a sync after
# each), batches of shapes already seen, 50,000-token batches for `base`, then the GPU tests.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_wiring.py -k "gpu or queued or whole_group" 2>&1 | tail -4
gpu() { name=$1; shift; timeout "$@" 2>&1 | grep -v "^ *warnings.warn\|UserWarning\|^$" | tee "$OUT/$name.log" | grep -E "^(base|big)  |matmul|Error|error" ; }
gpu s23-wmt-sync 170 python3 benchmarks/speed_gpu.py --wmt-lengths --presets base big --updates 60 --warmup 25 --sync-each-update --out "$OUT/s23-wmt-sync.json"
gpu s23-wmt 110 python3 benchmarks/speed_gpu.py --wmt-lengths --presets base big --updates 60 --warmup 25 --profile --out "$OUT/s23-wmt.json"
gpu s23-wmt-seen 90 python3 benchmarks/speed_gpu.py --wmt-lengths --presets base big --updates 60 --warmup 25 --seen-shapes --out "$OUT/s23-wmt-seen.json"
gpu s23-wmt-base-50k 70 python3 benchmarks/speed_gpu.py --wmt-lengths --presets base --max-tokens 50000 --updates 45 --warmup 20 --out "$OUT/s23-wmt-base-50k.json"
timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_compiled.py tests/test_loss.py 2>&1 | tail -4

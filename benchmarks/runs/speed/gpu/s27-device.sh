#!/usr/bin/env bash
# Session 27's GPU check (issue 17, target 5), one call of the `device` tool: `big` and `base`
# bf16 training at WMT lengths on new batch shapes (20 updates of warm-up, 30 timed, as
# gpu_check.sh), today's update against one change at a time, each run with an Inductor cache of
# its own (a compiled graph keeps the attention kernel of its first trace):
#   efficient  every attention on the memory-efficient kernel, the decoder's causal one included
#              (session 24's profile: flash's causal backward 856 us a call against 442 us for
#              the efficient kernel's padded, non-causal ones of the same layers' size)
#   lse        the loss's sums through logsumexp (`--loss-form lse`, an option of speed_gpu.py in
#              this call only: level for `big`, removed after it; now `--loss-form` picks chunks)
#   math       attention written out, fused by Inductor
#   cdt        Inductor's coordinate-descent tuning of its kernels (`big` only)
# then the best of each for `big`, together, with a profile of 5 updates, and if time is left
# `base` with Inductor's C++ wrapper (kernels launched from C++ rather than Python).
#     bash benchmarks/runs/speed/gpu/s27-device.sh     # results in $OUT or /tmp/gpu-s27
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-s27}
mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"

speed() {
    local name=$1 seconds=$2
    shift 2
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout "$seconds" python3 benchmarks/speed_gpu.py \
        --wmt-lengths --updates 45 --warmup 20 --out "$OUT/$name.json" "$@" 2>&1 |
        grep -v "warn\|^$" >"$OUT/$name.log"
    echo "[$name, $(($(date +%s) - start)) s]"
    grep -E "^(base|big)  |rror" "$OUT/$name.log" | cut -c1-230 | head -4
}
speed default 110 --presets big base
speed efficient 110 --presets big base --sdpa efficient
# speed lse 110 --presets big base --loss-form lse    # as run in session 27's first call
speed math 100 --presets big base --sdpa math
speed cdt 90 --presets big --inductor coordinate_descent_tuning=True

# The best of each for `big`: attention kernel, tuning (a change counts if >= 1%).
best=$(python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def rate(name, preset="big"):
    try:
        rows = json.loads((out / f"{name}.json").read_text())["rows"]
    except (OSError, ValueError):
        return 0
    return next((r["target_tokens_per_s"] for r in rows if r["preset"] == preset), 0)
base = rate("default")
args = []
kernel = max(["default", "efficient", "math"], key=rate)
if kernel != "default" and rate(kernel) > 1.01 * base:
    args += ["--sdpa", kernel]
if rate("cdt") > 1.01 * base:
    args += ["--inductor", "coordinate_descent_tuning=True"]
print(" ".join(args))
PY
)
echo "best for big: ${best:-the update as it is}"
if [ -n "$best" ]; then
    speed best 130 --presets big base $best --profile
fi
if (($(date +%s) - start < 420)); then  # `base` waits on the host: Inductor's C++ launcher
    speed cpp-wrapper 100 --presets base --inductor cpp_wrapper=True
fi
echo "[done, $(($(date +%s) - start)) s]"

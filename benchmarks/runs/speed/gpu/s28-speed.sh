# Sourced by s28-device.sh, s28-device-2.sh, s29-device.sh, s31-device.sh and s32-next.sh:
# `speed NAME SECONDS ARGS...` runs speed_gpu.py on new shapes (20 updates of warm-up, 25 timed)
# in a process of its own, with an Inductor cache of its own, into $OUT/NAME.{json,log}, and
# prints its row; $start is the call's.
# The pairs: $SPEED_DATA's arguments (default `--wmt-lengths`, synthesised in each process).
# Since session 34 a run names neither `--one-source-length` nor `--mixed-source-lengths` takes
# the preset's batches (one source length for `base` and `big`); before, mixed lengths.
speed() {
    local name=$1 seconds=$2
    local data=(${SPEED_DATA:---wmt-lengths})
    shift 2
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout "$seconds" python3 benchmarks/speed_gpu.py \
        "${data[@]}" --updates 45 --warmup 20 --out "$OUT/$name.json" "$@" 2>&1 |
        grep -v "warn\|^$" >"$OUT/$name.log"
    echo "[$name, $(($(date +%s) - start)) s]"
    grep -E "^(base|big|tiny) |rror" "$OUT/$name.log" | cut -c1-300 | head -4
}

# `pairs N`: N synthetic pairs of WMT14 lengths prepared once for the call's runs ($SPEED_DATA).
pairs() {
    local wmt
    wmt=$(mktemp -d)/wmt
    python3 benchmarks/wmt_lengths.py "$wmt" --pairs "$1" >/dev/null
    SPEED_DATA="--prepared $wmt"
    echo "[synthesised $1 pairs, $(($(date +%s) - start)) s]"
}

# `begin DEFAULT_OUT`: a call's setting-up: the project on the path, $OUT (DEFAULT_OUT unless set)
# made, and the call's clock ($start) started.
begin() {
    export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
    OUT=${OUT:-$1}
    mkdir -p "$OUT"
    start=$(date +%s)
}

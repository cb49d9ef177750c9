# Sourced by s28-device.sh and s28-device-2.sh: `speed NAME SECONDS ARGS...` runs speed_gpu.py at
# WMT lengths on new shapes (20 updates of warm-up, 25 timed) in a process of its own, with an
# Inductor cache of its own, into $OUT/NAME.{json,log}, and prints its row; $start is the call's.
speed() {
    local name=$1 seconds=$2
    shift 2
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout "$seconds" python3 benchmarks/speed_gpu.py \
        --wmt-lengths --updates 45 --warmup 20 --out "$OUT/$name.json" "$@" 2>&1 |
        grep -v "warn\|^$" >"$OUT/$name.log"
    echo "[$name, $(($(date +%s) - start)) s]"
    grep -E "^(base|big)  |rror" "$OUT/$name.log" | cut -c1-240 | head -4
}

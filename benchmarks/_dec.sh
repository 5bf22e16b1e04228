# Sourced by the one-GPU device scripts (gpu_s17a.sh; the earlier ones now under results/raw/session*/scripts):
# `dec NAME GEOMETRY [bench_decode args...]` runs
# bench_decode.py at 1 and 8 streams (prompt 512, 30 steps) into $R/decode_NAME.{md,txt} and prints its figures.
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
dec() {
    local n=$1 g=$2; shift 2
    timeout 240 python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8 --prompts 512 \
        --steps 30 --out "$R/decode_$n.md" "$@" >"$R/decode_$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "decode \|prompt \|Error\|error" "$R/decode_$n.txt" | head -8
}

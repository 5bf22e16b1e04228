# Sourced by the one-GPU device scripts (gpu_s18a.sh; earlier ones: results/raw/session*/scripts):
# - `out_dir NAME`: results go to $R = ${OUT:-/tmp/NAME}/r; `pack` tars them into $OUT/NAME.tar.gz (the device
#   returns only a few files, so a script packs after each step).
# - `dec NAME GEOMETRY [bench_decode args...]` runs bench_decode.py at 1 and 8 streams (prompt 512, 30 steps) into
#   $R/decode_NAME.{md,txt} and prints its figures.
# - `synth_all DIR GEOMETRY...` writes the synth checkpoints the decode benchmarks read.
# - `full GEOMETRY CAP [bench_decode args...]` runs issue 4's matrix for one geometry (1 / 8 / 32 streams, prompts
#   of 512 / 4,096 / 16,384 tokens) into $R/full_GEOMETRY.{md,txt}, capped by CAP and by what is left of $LIMIT
#   since $t0, and packs.
# - `ptest NAME TIMEOUT pytest-args...` runs one GPU-tier pytest process into $R/NAME.txt with its own kernel cache
#   (several may run side by side with `&` and `wait`: compiles are CPU-bound; nothing they do is timed).
# - `ab GEOMETRY STREAMS CAP SETS`: bench_decode.py's in-process A/B of the ";"-separated switch SETS (no prompt, 40
#   steps, two rounds) into $R/ab_GEOMETRY.{md,txt}, capped by CAP and by what is left of $LIMIT, and packs; returns
#   1 without running when less than a minute is left.
# - `begin NAME [GEOMETRY...]`: `out_dir NAME`, t0 and LIMIT (default 540), the GPU's name into $R/gpu.txt, and the
#   synth checkpoints of the geometries written in the background (`wait` for them before a decode benchmark).
set -u
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfkc}
out_dir() {
    OUT=${OUT:-/tmp/$1}
    R=$OUT/r
    PACK_NAME=$1
    mkdir -p "$R"
}
pack() { tar -czf "$OUT/$PACK_NAME.tar.gz" -C "$OUT" r; }
dec() {
    local n=$1 g=$2; shift 2
    timeout 240 python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8 --prompts 512 \
        --steps 30 --out "$R/decode_$n.md" "$@" >"$R/decode_$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "decode \|prompt \|Error\|error" "$R/decode_$n.txt" | head -8
}
synth_all() {
    # `synth_all DIR GEOMETRY...`: the 4-bit g64 synth checkpoints DIR/synth-G-4bit-g64, written side by side (CPU
    # only, so it may run beside GPU tests with `&`)
    local d=$1 g; shift
    for g in "$@"; do
        python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_decode import write_synth_any; \
write_synth_any('$g', '$d/synth-$g-4bit-g64', bits=4, group_size=64)" > "$R/synth_$g.txt" 2>&1 &
    done
    wait
}
ptest() {
    local n=$1 s=$2; shift 2
    TENSORFOLD_CACHE_DIR=/tmp/tfkc_$n timeout "$s" python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
        --tb=short "$@" >"$R/$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "passed\|failed\|rror" "$R/$n.txt" | tail -4
}
full() {
    local g=$1 cap=$2 left tmo; shift 2
    left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 80 ] && { echo "== full $g skipped ($left s left)"; return; }
    tmo=$((left < cap ? left : cap))
    timeout "$tmo" python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8,32 \
        --prompts 512,4096,16384 --steps 100 "$@" --out "$R/full_$g.md" > "$R/full_$g.txt" 2>&1
    echo "== full $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|prompt \|passed\|failed\|rror" "$R/full_$g.txt" | cut -c1-150 | head -20; pack
}
ab() {
    local g=$1 st=$2 cap=$3 sets=$4 left
    left=$((LIMIT - (SECONDS - t0) - 5))
    [ "$left" -lt 60 ] && { echo "== ab $g skipped ($left s left)"; return 1; }
    timeout $((left < cap ? left : cap)) python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm \
        --streams "$st" --prompts "" --steps 40 --ab-env "$sets" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/ab_$g.txt" | cut -c1-120 | head -20; pack
}
begin() {
    out_dir "$1"; shift
    t0=$SECONDS
    LIMIT=${LIMIT:-540}
    nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
    [ $# -gt 0 ] && { synth_all /tmp/tfm "$@" > /dev/null 2>&1 & }
    return 0
}

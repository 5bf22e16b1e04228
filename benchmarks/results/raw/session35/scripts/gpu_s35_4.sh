#!/usr/bin/env bash
# Session 35 call 4: 27B decode with smaller K chunks (cg 8 instead of the plans' 16) on some shapes. Call 3 found
# cg 32 at 5120 x 6144 3.5 % slower in decode although session 23's kernel timing had it faster: under PDL the x
# preparation after the wait is serial, and a larger chunk lengthens it. So the other direction may pay: V1 the
# two narrow shapes (5120 x 6144 out_proj / o_proj, 5120 x 17408 down: 128 launches a step), V2 the wide ones
# (in_all 16480 x 5120, qkv 14336 x 5120, gate+up 34816 x 5120). Prediction: unknown sign, within +-2 %; V1 more
# likely to gain (ks 6 -> 12 and 17 -> 34 give more (tile, chunk) pairs than warps). If a variant beats base by
# > 0.5 % at one stream in both of its rounds, the 27B graph-vs-eager GPU test runs under it.
. benchmarks/_dec.sh
out_dir s35_4
t0=$SECONDS
run() {  # NAME TIMEOUT [ENV=VALUE ...]
    local n=$1 s=$2; shift 2
    env "$@" timeout "$s" python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --prompts "" --steps 40 \
        --streams 1,8 --out "$R/decode_$n.md" > "$R/decode_$n.txt" 2>&1
    echo "== $n ($*) rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error" "$R/decode_$n.txt" | head -4; pack
}
tok() { grep -h "decode   1 streams" "$R/decode_$1.txt" | awk '{print $5}'; }
V1="TENSORFOLD_GEMV3_CG=5120x6144=8,5120x17408=8"
V2="TENSORFOLD_GEMV3_CG=16480x5120=8,14336x5120=8,34816x5120=8"
run base 200
run v1 110 "$V1"
run v2 110 "$V2"
run base2 60
run v1b 60 "$V1"
run v2b 60 "$V2"
best=$(python3 - "$(tok base)" "$(tok base2)" "$(tok v1)" "$(tok v1b)" "$(tok v2)" "$(tok v2b)" <<'PY'
import sys
f = [float(x) if x else 0.0 for x in sys.argv[1:]]
b = max(f[0], f[1])
c = [("v1", min(f[2], f[3])), ("v2", min(f[4], f[5]))]
n, v = max(c, key=lambda t: t[1])
print(n if v > 1.005 * b else "")
PY
)
echo "== best: '${best}'"
left=$((515 - (SECONDS - t0)))
if [ -n "$best" ] && [ $left -gt 120 ]; then
    [ "$best" = v1 ] && E="$V1" || E="$V2"
    env "$E" TENSORFOLD_CACHE_DIR=/tmp/tfkc timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
        --tb=short -s tests/runtime/test_gpu_graphs_large.py -k 27b > "$R/large_$best.txt" 2>&1
    echo "== large ($E) rc $?"; grep -h "passed\|failed\|== eager" "$R/large_$best.txt" | tail -3
fi
pack
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Session 35 call 3. (a) 27B: the one decode GEMV shape whose one-row K chunk the session-23 sweep would change,
# 5120 x 6144 (out_proj and o_proj, 64 launches a step) at cg 32 instead of the plan's 16 (kernel, 1 / 8 rows:
# 14.2 / 20.6 -> 13.4 / 17.4 us in session 23). Separate processes (plans and the swept layout are fixed at load),
# alternated twice. Prediction: one stream +0.5 to +0.8 % (-0.8 us x 64 = -51 us of 6.75 ms), eight +1 to +2 %.
# (b) decode at long context, never measured (session 34's gpu_s35b.sh without the peer): 9B, bf16 KV, 1 / 8 streams
# after 4,096-token prompts and one stream after 16,384. Prediction: ~360 tok/s at 4,096 (1 stream; +134 MB of KV
# reads a step on 4.5 GB), ~1,700 at 8 streams; ~330 at 16,384.
. benchmarks/_dec.sh
out_dir s35_3
t0=$SECONDS
run() {  # NAME GEOMETRY TIMEOUT [ENV=VALUE ...] -- [bench_decode args]
    local n=$1 g=$2 s=$3; shift 3
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    env "${envs[@]}" timeout "$s" python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --prompts "" \
        --steps 40 --out "$R/decode_$n.md" "$@" > "$R/decode_$n.txt" 2>&1
    echo "== $n (${envs[*]}) rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error" "$R/decode_$n.txt" | head -4; pack
}
CG=TENSORFOLD_GEMV3_CG=5120x6144=32
run 27b_base 27b 200 -- --streams 1,8
run 27b_cg32 27b 120 $CG -- --streams 1,8
run 27b_base2 27b 90 -- --streams 1,8
run 27b_cg32b 27b 90 $CG -- --streams 1,8
run 9b_ctx4k 9b 150 -- --streams 1,8 --decode-prompt 4096
run 9b_ctx16k 9b 120 -- --streams 1 --decode-prompt 16384
echo "== done at $((SECONDS - t0)) s"

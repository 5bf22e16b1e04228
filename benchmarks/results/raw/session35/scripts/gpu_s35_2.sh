#!/usr/bin/env bash
# Session 35 call 2: which decode GEMVs should run on qgemv (the persistent tensor-core kernel) instead of the
# first tensor-core kernel (affine's tc plans). The size line V3_MIN_CODES = 2^25 dates from sessions 15-16, before
# the swept layout, bf16 x, the batched completion, PRE=2 / XQ and the per-warp completion unroll (9B gate+up one row
# 29.2 -> 19.9 us since). Session 22 measured 9B's 4096 x 4096 on qgemv at cg 16 8.6 / 12.6 us (1 / 8 rows) against
# the first kernel's 10.7 / 10.9. Each setting is its own process (plans are fixed at load); one kernel cache.
# Predictions: 9B with the 4096 x 4096 weights (32 launches a step) on qgemv at cg 16: one stream +2-4 %
# (about -2.5 us a launch), 8 streams -1 to -2 %. 2B with every GEMV on qgemv: unknown sign at one stream (session
# 16 had qgemv slower at every 2B shape, before the improvements above); 8 streams slower.
. benchmarks/_dec.sh
out_dir s35_2
t0=$SECONDS
run() {  # NAME GEOMETRY [ENV=VALUE ...]
    local n=$1 g=$2; shift 2
    env "$@" timeout 150 python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 40 --out "$R/decode_$n.md" > "$R/decode_$n.txt" 2>&1
    echo "== $n ($*) rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error" "$R/decode_$n.txt" | head -4; pack
}
CG2B="12288x2048=16,8224x2048=16,5120x2048=16,2048x2048=16,2048x6144=16"
run 2b_base 2b
run 2b_v3 2b TENSORFOLD_GEMV_V3=1
run 2b_v3cg16 2b TENSORFOLD_GEMV_V3=1 TENSORFOLD_GEMV3_CG=$CG2B
run 9b_base 9b
run 9b_log24 9b TENSORFOLD_GEMV_V3_LOG2=24
run 9b_log24cg16 9b TENSORFOLD_GEMV_V3_LOG2=24 TENSORFOLD_GEMV3_CG=4096x4096=16
run 2b_base2 2b
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Prepared in session 27 (one GPU, about 9 minutes): what session 27's call 3 could not finish. The 27B decode
# with the batched completion (the synth write + load did not fit 220 s), then the qgemv GPU tests it did not reach
# (prefetch / mid shapes / deferred), the rest in parallel as a recheck, and the fused GDN kernel's GPU tests (session
# 27 loads the gated norm's o / z / weight values in one round trip: same arithmetic, 128 -> 145 registers; the
# simulator cannot see fma contraction, so only the GPU test shows the bits still equal the unfused path).
. benchmarks/_dec.sh
out_dir s28b
t0=$SECONDS
timeout 420 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 30 --out "$R/decode_27b.md" >"$R/decode_27b.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/decode_27b.txt" | head -4; pack
F=tests/kernels/test_gpu_qgemv.py
ptest qb 160 $F -k "prefetch or mid_shapes or deferred" &
ptest qa 160 $F -k "rows_1_to_16 or formats or through" &
ptest fused 160 tests/kernels/test_gpu_fused.py &
wait
echo "== tests at $((SECONDS - t0)) s"; pack

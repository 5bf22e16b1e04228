#!/usr/bin/env bash
# Prepared in session 34 (its call 4 was refused: too little device time left), for the next session: the code after the loader refactor (one
# _device.asm_vec_load for every module's vector loads; same sm_90 PTX locally) and the review commit, on the GPU:
# 2B synth decode at 1 / 8 streams (every kernel of the decode step compiled and run), then the PDL GPU test.
# Prediction: decode within noise of session 33 (749.2 / 4,732.5 tok/s), the test passes.
. benchmarks/_dec.sh
out_dir s35c
t0=$SECONDS
timeout 120 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" --steps 30 \
    --out "$R/decode_2b.md" > "$R/decode_2b.txt" 2>&1
echo "== 2b decode rc $? at $((SECONDS - t0)) s"; grep -h "decode \|loaded" "$R/decode_2b.txt" | head -4; pack
left=$((170 - (SECONDS - t0)))
[ $left -gt 20 ] && ptest pdl $left tests/runtime/test_gpu_pdl.py
pack
echo "== done at $((SECONDS - t0)) s"

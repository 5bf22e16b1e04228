#!/usr/bin/env bash
# Session 26, call 1 (one GPU): (1) session 25's review-mended attention_prompt on the GPU (gpu_s25f.sh's test and
# bench row); (2) the bulk-copy floor: can per-warp rings filled by cp.async.bulk stream a qgemv-sized read near a
# plain read's rate, with no registers held in flight? Prediction: 56.6 MB at qgemv's grid (396 x 128), 4 stages of
# 2.3 KB: <= 15.5 us (the register-load regions read 17.0 us in session 20; qgemv without arithmetic 22.5).
. benchmarks/_dec.sh
out_dir s26b
t0=$SECONDS
ptest attp 120 tests/kernels/test_gpu_attention_prompt.py
pack
timeout 60 python3 benchmarks/bench_kernels_b.py --models 2B,27B --only attn_prompt --out "$R/kernels_b.md" \
    >"$R/kernels_b.txt" 2>&1
echo "== attn bench rc $? at $((SECONDS - t0)) s"; grep -h "prompt attention\|peer\|rror" "$R/kernels_b.txt"; pack
timeout 240 python3 benchmarks/bench_gemv3.py --shapes - --rows 1 --no-old --out "$R" --floor-bulk 28.3,56.6,100 \
    --bulk-confs "2,576,396,128;4,576,396,128;8,576,396,128;4,1152,396,128;4,2304,396,128;6,576,528,128;4,576,132,384;8,576,132,384;4,576,264,256" \
    >"$R/bulk.txt" 2>&1
echo "== bulk rc $? at $((SECONDS - t0)) s"; grep -h "floor\|FAIL\|rror\|copy" "$R/bulk.txt" | head -40; pack
echo "== done at $((SECONDS - t0)) s"

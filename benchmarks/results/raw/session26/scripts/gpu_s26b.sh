#!/usr/bin/env bash
# Session 26, call 1 (one GPU): the bulk-copy ring for the decode GEMV (qgemv bk).
# (1) The bulk-copy floor: per-warp rings filled by cp.async.bulk against the register-load regions read at qgemv's
#     grid. Prediction: 56.6 MB, 396 x 128, 4 stages of 2.3 KB: <= 15.5 us (regions 17.0 us in session 20; qgemv
#     without arithmetic 22.5 us).
# (2) qgemv swept, register ring vs bulk ring of 2 / 4 / 8 stages, 1 and 8 rows, at 9B gate+up, 9B down, 27B
#     gate+up, 27B down (plain and SwiGLU). Prediction at one row: 9B gate+up 24.8 -> 19-21 us, 27B down 26.5 ->
#     18-21 us.
# (3) GPU tier of the bulk ring (bit-equal to the register ring at real shapes) and of session 25's review-mended
#     attention_prompt.
. benchmarks/_dec.sh
out_dir s26b
t0=$SECONDS
timeout 150 python3 benchmarks/bench_gemv3.py --shapes - --rows 1 --no-old --out "$R" --floor-bulk 28.3,56.6,100 \
    --bulk-confs "2,576,396,128;4,576,396,128;8,576,396,128;4,1152,396,128;4,2304,396,128;6,576,528,128;4,576,132,384;8,576,132,384" \
    >"$R/bulk_floor.txt" 2>&1
echo "== floor rc $? at $((SECONDS - t0)) s"; grep -h "floor\|FAIL\|rror\|copy" "$R/bulk_floor.txt" | head -40; pack
timeout 260 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 --rows 1,8 --no-old --swept --only-sw --glu \
    --bulk 2,4,8 --out "$R" >"$R/bulk_gemv.txt" 2>&1
echo "== gemv rc $? at $((SECONDS - t0)) s"; grep -v "^\s*$" "$R/bulk_gemv.txt" | grep -h "us\|FAIL\|rror" | head -60; pack
ptest bulk 120 tests/kernels/test_gpu_qgemv.py -k bulk
pack
ptest attp 60 tests/kernels/test_gpu_attention_prompt.py
pack
echo "== done at $((SECONDS - t0)) s"

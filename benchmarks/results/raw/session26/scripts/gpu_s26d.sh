#!/usr/bin/env bash
# Session 26, call 2 (one GPU): call 1 found the bulk ring slower at every shape and its GPU test failing (".FFF"
# before the timeout, no message kept). Here: the first failure's message (-x; call 1: bk 2 passed at 9B gate+up, failed at 9B down, 27B down, 27B out_proj), and the bulk floor at 56.6 / 100 MB
# (call 1's floor stopped at 28.3 MB: 12 warps x 8 stages overran the kernel's 64 barriers, now 128 and checked).
. benchmarks/_dec.sh
out_dir s26d
t0=$SECONDS
timeout 120 python3 benchmarks/bench_gemv3.py --shapes - --rows 1 --no-old --out "$R" --floor-bulk 56.6,100 \
    --bulk-confs "2,576,396,128;4,576,396,128;4,1152,396,128;4,576,132,384;8,576,132,384" >"$R/bulk_floor.txt" 2>&1
echo "== floor rc $? at $((SECONDS - t0)) s"; grep -h "floor\|FAIL\|copy" "$R/bulk_floor.txt" | head -20; pack
ptest bulk 240 tests/kernels/test_gpu_qgemv.py -x -k "bulk_ring_real_shapes and 2-9B and down" --tb=short
grep -h "Error\|assert\|R=" "$R/bulk.txt" | head -20; pack
echo "== done at $((SECONDS - t0)) s"

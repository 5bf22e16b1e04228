#!/usr/bin/env bash
# Prepared in session 22 for the next session's first device call (one GPU, about 9-10 minutes; split it if
# the per-call limit is near).
# Output projections on qgemv with long K chunks. Session 22 (call 4) found fewer, longer chunks faster (9B 4096 x
# 4096: cg 8 -> 16, 10.6 / 16.8 -> 8.6 / 12.6 us at 1 / 8 rows; the first kernel's pipe2: 10.6-10.8 / 10.8-11.0).
# cg 32 / 64 now keep the x fragments in dynamic shared memory (qgemv.xb_dynamic), set per shape with
# TENSORFOLD_GEMV3_CG; cg 64 takes about 98 KB a block (2 blocks an SM), hence the 264-block rows.
# Prediction: cg 32 about 7.5-8 us at one row and <= 11 us at eight (ks 2: one partial round trip); if it beats
# pipe2 at both, 9B decode with TENSORFOLD_GEMV_V3=1 (routes 4096 x 4096 to qgemv) gains about 32 x 2.5 us a step.
. benchmarks/_dec.sh
out_dir s23a
# first, the GPU tier of session 22's last code commits (4035072: one launch path for dynamic shared memory in
# qgemv.launch; generated sources unchanged), which the device could no longer start for
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    tests/kernels/test_gpu_glu.py >"$R/gpu_qgemv.txt" 2>&1
echo "== gpu tests rc $?"; tail -2 "$R/gpu_qgemv.txt"; pack
timeout 200 python3 benchmarks/bench_gemv3.py --shapes - --custom "4096,4096;5120,6144" --rows 1,8 --swept --only-sw \
    --configs "4,1,4,1,396,0,0,0,16;4,1,4,1,396,0,0,0,32;4,1,4,1,264,0,0,0,32;4,1,4,1,264,0,0,0,64" \
    --out "$R" >"$R/oproj_cg.txt" 2>&1
echo "== sweep rc $?"; grep "R=" "$R/oproj_cg.txt"; pack
dec 9b 9b; pack
TENSORFOLD_GEMV_V3=1 TENSORFOLD_GEMV3_CG="4096x4096=32" dec 9b_cg32 9b; pack
TENSORFOLD_GEMV3_CG="5120x6144=32" dec 27b_cg32 27b; pack
dec 27b 27b; pack

#!/usr/bin/env bash
# Session 22, call 4 (one GPU, the session's last ~250 s): the output projections on qgemv, K-chunk sweep. 9B
# out_proj / o_proj 4096 x 4096 (the first kernel's pipe2, 10.6-10.8 us, 21 % of copy; 32 launches a 9B step) and
# 27B 5120 x 6144 (qgemv ks 6, 13.9-14.1 us, 30 %; 128 launches a 27B step). Swept layout, bf16-only x (the
# defaults), 1 and 8 rows; cg 4 / 8 / 16 (ks 16 / 8 / 4 at K 4096), u 2, 264 blocks. Prediction: shorter chains
# (smaller cg) help one row by at most 1-2 us; the fixed cost (launch, x prep, split-K tail) stays.
. benchmarks/_dec.sh
out_dir s22d
timeout 200 python3 benchmarks/bench_gemv3.py --shapes - --custom "4096,4096;5120,6144" --rows 1,8 --swept --only-sw \
    --configs "4,1,4,1,396,0,0,0,8;4,1,4,1,396,0,0,0,4;4,1,4,1,396,0,0,0,16;4,1,2,1,396,0,0,0,4;4,1,4,1,264,0,0,0,8" \
    --out "$R" >"$R/oproj_sweep.txt" 2>&1
echo "== sweep rc $?"; grep "R=" "$R/oproj_sweep.txt"; pack

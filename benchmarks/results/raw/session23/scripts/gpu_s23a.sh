#!/usr/bin/env bash
# Session 23, call 1 (one GPU, about 8 minutes): K-chunk sweep of every 9B / 27B decode GEMV on qgemv (swept layout,
# bf16-only x, the defaults). Session 22 (call 4) found fewer, longer chunks faster at the output projections
# (4096 x 4096: cg 8 -> 16 = 10.6 / 16.8 -> 8.6 / 12.6 us at 1 / 8 rows); cg 16 was the largest the static shared
# memory allows. Past it the x fragments live in dynamic shared memory (qgemv.xb_dynamic): cg 32 (about 48 KB a
# block, 3 blocks an SM at 396 blocks), cg 64 / 68 (about 98-104 KB, 2 an SM: 264 blocks).
# cg 136 (27B down ks 2; 209 KB, one block an SM: 132 blocks). A config cg that a shape cannot take becomes its largest divisor not above it (bench_gemv3).
# Prediction: cg 32 beats 16 at 1 row by 0.5-2 us on the 4096-input shapes (one fewer partial round trip, half
# the x preparations); 8 rows gain more (fewer partials: ks x 8 rows x out floats); ks 1 (cg 64 at K 4096) loses at
# the tall shapes (half the warps idle) but may win at 4096 x 4096.
. benchmarks/_dec.sh
out_dir s23a
CFG="4,1,4,1,396,0,0,0,16;4,1,4,1,396,0,0,0,32;4,1,4,1,264,0,0,0,64;4,1,4,1,132,0,0,0,136"
timeout 300 python3 benchmarks/bench_gemv3.py --shapes - --rows 1,8 --swept --only-sw --configs "$CFG" \
    --custom "4096,4096;5120,6144;4096,12288;5120,17408;12352,4096;16480,5120;10240,4096;14336,5120" \
    --out "$R/a" >"$R/cg_sweep.txt" 2>&1
echo "== sweep rc $?"; grep "R=" "$R/cg_sweep.txt"; pack
timeout 170 python3 benchmarks/bench_gemv3.py --shapes - --rows 1,8 --swept --only-sw --glu --configs "$CFG" \
    --custom "24576,4096;34816,5120" --out "$R/b" >"$R/cg_glu.txt" 2>&1
echo "== glu rc $?"; grep "R=" "$R/cg_glu.txt"; pack

#!/usr/bin/env bash
# Session 23, call 2 (one GPU, about 7-8 minutes): the rest of call 1's K-chunk sweep (call 1 ran out of time after
# the output projections and gate+up: its kernels compiled one at a time), then 27B decode with 5120 x 6144 at
# cg 32 against the default. Call 1: 5120 x 6144 cg 16 -> 32 = 14.2 / 20.6 -> 13.4 / 17.4 us (1 / 8 rows);
# 4096 x 4096 and 9B gate+up lose at one row with longer chunks.
# Pass 1 compiles every shape's kernels in parallel processes (own cache directory each; their timings are not
# used), pass 2 times the shapes one at a time from those caches.
# Prediction: down (ks 12 / 17 today) gains at 8 rows with 2-4x longer chunks and holds at one row; the tall
# in_proj / qkv shapes behave like gate+up (cg 16 best at one row). 27B decode: +0.8 us x 64 launches at one
# stream (about +0.7 %), +3 us x 64 at eight (about +1.5 %).
. benchmarks/_dec.sh
out_dir s23b
C="4,1,4,1"
declare -a SH=("4096,12288" "5120,17408" "12352,4096" "16480,5120" "10240,4096" "14336,5120")
declare -a CF=("$C,396,0,0,0,16;$C,396,0,0,0,32;$C,396,0,0,0,48;$C,264,0,0,0,64;$C,132,0,0,0,96"
               "$C,396,0,0,0,16;$C,264,0,0,0,68;$C,132,0,0,0,136"
               "$C,396,0,0,0,16;$C,396,0,0,0,32"
               "$C,396,0,0,0,16;$C,396,0,0,0,20;$C,396,0,0,0,40"
               "$C,396,0,0,0,16;$C,396,0,0,0,32"
               "$C,396,0,0,0,16;$C,396,0,0,0,20;$C,396,0,0,0,40")
sweep() {  # pass-name index
    TENSORFOLD_CACHE_DIR=/tmp/tfkc_$2 timeout 200 python3 benchmarks/bench_gemv3.py --shapes - --rows 1,8 --swept \
        --only-sw --configs "${CF[$2]}" --custom "${SH[$2]}" --out "$R/$1_$2" >"$R/$1_$2.txt" 2>&1
}
t0=$SECONDS
for i in "${!SH[@]}"; do sweep pre "$i" & done
wait
echo "== precompile $((SECONDS - t0)) s"
for i in "${!SH[@]}"; do sweep cg "$i"; echo "== shape $i rc $? at $((SECONDS - t0)) s"; grep -h "R=" "$R/cg_$i.txt"; pack; done
rm -f "$R"/pre_*.txt
dec 27b 27b; pack
TENSORFOLD_GEMV3_CG="5120x6144=32" dec 27b_cg32 27b; pack

#!/usr/bin/env bash
# Session 41, call 4 (the last: about 600 s of budget left). Call 3 showed the 16-range plan's 8-warp kernel (two
# ranges a warp, 16 partial tiles through shared memory) at 11.27 us a launch under PDL against the 8-range plan's
# 10.14 (its loop 8.96 vs 7.94 us: two ranges interleaved an iteration), and 9B decode at eight streams -0.6 %.
# Now a warp walks its two ranges as the 8-range kernel walks its one (the same loads in the same order, u 2),
# setting its accumulators aside at the second range's first iteration, and hands one partial tile over (8 in
# shared memory, as before); the whole form sums its 16 two at a time first (same bits).
# (1) GPU: the 9B out_proj real-shape test (rows 1/2/8/16 alone = together) and the whole / vwarps same-bits tests
#     (the other shapes run kernels whose source is unchanged: vs 1, rg 1).
# (order: tests, decode, timeline; the budget may cut the tail)
# (2) tc_timeline 4096 x 4096: predicted plan 10.1-10.4 (the 8-range plan's 10.14-10.2), whole 9.2 us under PDL.
# (3) 9B decode VWARPS 0 vs sq, one process each, alternated: predicted one stream +1.4 %, eight a tie.
. benchmarks/_dec.sh
out_dir s41d
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
ptest gemv 150 tests/kernels/test_gpu_gemv.py -k "whole or (real_shapes and 9B)" -s
pack
echo "== tests done at $((SECONDS - t0)) s"
for r in 1 2; do
    for vw in 0 sq; do
        TENSORFOLD_TC_VWARPS=$vw timeout 130 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm \
            --streams 1,8 --prompts "" --steps 100 --out "$R/vw_${r}_$vw.md" > "$R/vw_${r}_$vw.txt" 2>&1
        echo "== 9b vwarps $vw round $r rc $? at $((SECONDS - t0)) s"
        grep -h "decode \|Error" "$R/vw_${r}_$vw.txt" | head -4
        pack
    done
    [ $((SECONDS - t0)) -gt 150 ] && break
done
timeout 80 python3 benchmarks/tc_timeline.py --shapes 4096x4096 --whole --out "$R" > "$R/tc_timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us per launch\|same bits\|Error" "$R/tc_timeline.txt" | head
pack
echo "== done at $((SECONDS - t0)) s"

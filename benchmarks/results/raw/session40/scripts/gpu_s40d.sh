#!/usr/bin/env bash
# Session 40, call 2. The 9B 4096 x 4096 first-kernel launch (out_proj / o_proj) at other geometries, each plain and
# in its whole-share form, phases by %globaltimer (tc_timeline.py). Call 1 (H100): the plan (pipe2, mt 2, 8 warps,
# 128 blocks) 10.2 us a launch under PDL, its whole form 9.8, where the whole form spent 3.3 us on arithmetic alone
# after its data arrived (8 warps an SM, 2 a scheduler). Predictions: 16 warps a block (mt 2, 4 groups a warp, same
# instructions an SM, 4 warps a scheduler) whole about 7.5-8.5 us; mt 1 at 8 warps (256 blocks, two an SM, x prepared
# twice an SM) whole about 8-9 us.
. benchmarks/_dec.sh
out_dir s40d
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"
timeout 240 python3 benchmarks/tc_timeline.py --shapes 4096x4096 --whole --forms "2,16,0;2,16,1;1,8,0;1,8,1;1,16,1" \
    --out "$R" > "$R/tc_timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us per launch\|same bits\|Error" "$R/tc_timeline.txt" | head -30
pack

#!/usr/bin/env bash
# Session 37, call 6 (replaces gpu_s37f.sh for lack of device time): where a one-stream decode step spends its time
# now (bench_decode --host-split: graph replay alone, replay + a sync each, DecodeGraphs.step, decode_sample, and
# pipelined launch_step / wait_step), 2B and 9B, 1 and 8 streams. Last measured pre-11 (2B, 1 stream: replay 1.687,
# decode_sample 1.830, pipelined 1.746 ms). Question: is the one-stream figure (decode_sample, the engine's call)
# bound by host time on the critical path? The greedy graphs' gain (+4 to +7 % at 2B, 3-7x the skipped kernels'
# time) suggests host work per step matters. Prediction: decode_sample - replay = 80-150 us at 2B one stream;
# pipelined within 30 us of replay. Then the fused-norm kernel test's 27B gate|up case on the corrected launch path.
. benchmarks/_dec.sh
out_dir s37g
t0=$SECONDS
for g in 2b 9b; do
    timeout 100 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 40 --host-split --out "$R/split_$g.md" > "$R/split_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "host split\|decode " "$R/split_$g.txt" | head -6; pack
done
ptest fuse_k27 75 tests/kernels/test_gpu_norm_fuse.py -k "27B" -s
pack
echo "== done at $((SECONDS - t0)) s"

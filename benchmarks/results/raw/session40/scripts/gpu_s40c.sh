#!/usr/bin/env bash
# Session 40, call 1. (1) The first tensor-core kernel's phases at the square shapes (tc_timeline.py), the plan's
# kernel against the new whole-share form (TENSORFOLD_TC_WHOLE): predicted 9B 4096 x 4096 under PDL about 10 -> 6 us
# a launch, the 2B 2048 x 2048 about the same (its plan already loads its only iteration before the wait).
# (2) Decode A/B in one process, two rounds: TC_WHOLE 0 vs sq at 2B / 9B, 1 and 8 streams (eight rows keep the plan's
# kernel): predicted 9B +3 to +5 % at one stream, 2B 0 to +1 %. (3) The GPU tier (s40a's four groups plus the whole
# form's GPU test), compile-bound, after the timed parts.
. benchmarks/_dec.sh
out_dir s40c
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"
timeout 120 python3 benchmarks/tc_timeline.py --shapes 4096x4096,2048x2048 --whole --out "$R" > "$R/tc_timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us per launch\|same bits\|Error" "$R/tc_timeline.txt" | head -20; pack
AB="TENSORFOLD_TC_WHOLE=0;TENSORFOLD_TC_WHOLE=sq"
for g in 9b 2b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --ab-env "$AB" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error" "$R/ab_$g.txt" | head -12; pack
done
left=$((570 - (SECONDS - t0)))
echo "== tests with ${left} s left"
ptest ahead $left tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
TENSORFOLD_CHAIN_GRAPH=1 ptest ahead_chain $left tests/runtime/test_gpu_ahead.py -s &
ptest graphs $left tests/runtime/test_gpu_graphs.py -s &
ptest attn $left tests/kernels/test_gpu_attention.py tests/kernels/test_gpu_gemv.py -k "not variants" -s &
wait
pack
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Prepared in session 40 (its device time ran out before it could run; session 41, first call): the final code's defaults (in-graph ids chain on, whole-share form for square weights)
# against the old ones in one process, the first kernel's 4096 x 4096 geometries (call 2's plan, refused twice),
# with the GPU tier of the final code first.
# (1) tc_timeline forms: predictions as gpu_s40d.sh (16 warps a block, mt 2, whole: 7.5-8.5 us under PDL).
# (2) Decode A/B, 2B / 9B, 1 and 8 streams, two rounds: old (CHAIN_GRAPH=0, TC_WHOLE=0) vs new defaults: predicted
#     2B +0.5 to +1.5 %, 9B +0.3 to +0.6 % at one stream (call 1 and session 39's single A/Bs added), 8 a tie.
# (3) GPU tier: run-ahead (now chained in the graphs by default) + backend parity, graphs, attention + GEMV.
. benchmarks/_dec.sh
out_dir s41a
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
# the GPU tier first (device time is short this session; nothing in it is timed)
ptest ahead 300 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest graphs 300 tests/runtime/test_gpu_graphs.py -s &
ptest gemv 300 tests/kernels/test_gpu_attention.py tests/kernels/test_gpu_gemv.py -k "not variants" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
AB="TENSORFOLD_CHAIN_GRAPH=0 TENSORFOLD_TC_WHOLE=0;TENSORFOLD_CHAIN_GRAPH=1 TENSORFOLD_TC_WHOLE=sq"
for g in 9b 2b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --ab-env "$AB" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error" "$R/ab_$g.txt" | head -12; pack
done
timeout 100 python3 benchmarks/tc_timeline.py --shapes 4096x4096 --whole --forms "2,16,0;2,16,1;1,8,0;1,8,1" \
    --out "$R" > "$R/tc_timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us per launch\|same bits\|Error" "$R/tc_timeline.txt" | head -30
pack
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Session 41, call 3: the 9B square plan at 16 K ranges (TENSORFOLD_TC_VWARPS=sq, commit after 5e01217): one-row
# launches in the whole form at 16 warps, the others 8 warps of two ranges each (same bits).
# (1) GPU tier: the GEMV tests (real shapes incl. 9B out_proj rows 1/2/8/16, whole / l2 / vwarps same bits), the
#     qgemv real-shape and format tests, run-ahead + backend parity, graphs.
# (2) tc_timeline 4096 x 4096: plan (now 8 warps x 2 ranges), whole (16 warps), the 16-warp plain kernel.
#     Predicted: plan ~10.1-10.3, whole ~9.2 us under PDL.
# (3) 9B decode, one process a setting, alternated twice, VWARPS 0 vs sq: predicted one stream +1.5 % (call 2:
#     354.6 -> 360.0), eight streams a tie (the same 8-warp kernel with two accumulator sets).
. benchmarks/_dec.sh
out_dir s41c
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
ptest gemv 300 tests/kernels/test_gpu_gemv.py -k "not variants" -s &
ptest qa 300 tests/kernels/test_gpu_a.py -k "qgemv" -s &
ptest ahead 300 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
timeout 100 python3 benchmarks/tc_timeline.py --shapes 4096x4096 --whole --forms "2,16,0" \
    --out "$R" > "$R/tc_timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us per launch\|same bits\|Error\|plan\"" "$R/tc_timeline.txt" | head -30
pack
for r in 1 2; do
    for vw in 0 sq; do
        TENSORFOLD_TC_VWARPS=$vw timeout 100 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm \
            --streams 1,8 --prompts "" --steps 100 --out "$R/vw_${r}_$vw.md" > "$R/vw_${r}_$vw.txt" 2>&1
        echo "== 9b vwarps $vw round $r rc $? at $((SECONDS - t0)) s"
        grep -h "decode \|Error" "$R/vw_${r}_$vw.txt" | head -4
        pack
        [ $((SECONDS - t0)) -gt 500 ] && break 2
    done
done
echo "== done at $((SECONDS - t0)) s"

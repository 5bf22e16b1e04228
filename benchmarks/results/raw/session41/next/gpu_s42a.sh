#!/usr/bin/env bash
# Prepared in session 41 (its budget ended in call 4). First call of session 42: the GPU tier of the final code
# (session 41 ran only the GEMV tests of the changed kernels on it), then the 16-range 9B plan's timeline and decode
# A/B with two rounds, then the three geometries' one-stream figures (on an H200 these are issues 3 / 4's).
# (1) GPU tier: run-ahead + backend parity, graphs, attention + GEMV (not the variants).
# (2) tc_timeline 4096 x 4096 with TENSORFOLD_TC_VWARPS 0 and sq (one process each): the 8-warp two-range kernel
#     (plan form) against the 8-range kernel; predicted the same within 0.3 us (the same loads and order).
# (3) 9B decode VWARPS 0 / sq, one process each, alternated twice: predicted +1.4 to +1.6 % at one stream, -0.4 %
#     at eight (call 4: 354.2 / 1,955.4 -> 359.8 / 1,946.8 on an H100).
# (4) 2B and 27B decode at the defaults (1 and 8 streams).
# (5) TENSORFOLD_TC_WHOLE_HALF=1 (built in session 41, unmeasured): the whole form with half its share loaded after
#     the wait, behind x's loads. Timeline (--half) and a one-process A/B at 9B / 2B: predicted 9B launch 9.2 ->
#     8-8.5 us under PDL, 9B one stream +0.5 to +1 %.
. benchmarks/_dec.sh
out_dir s42a
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
ptest ahead 300 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest graphs 300 tests/runtime/test_gpu_graphs.py -s &
ptest gemv 300 tests/kernels/test_gpu_attention.py tests/kernels/test_gpu_gemv.py -k "not variants" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
for vw in 0 sq; do
    mkdir -p "$R/tl_$vw"
    TENSORFOLD_TC_VWARPS=$vw timeout 80 python3 benchmarks/tc_timeline.py --shapes 4096x4096,2048x2048 --whole --half \
        --out "$R/tl_$vw" > "$R/tl_$vw/tc_timeline.txt" 2>&1
    echo "== timeline vwarps $vw rc $? at $((SECONDS - t0)) s"
    grep -h "us per launch\|same bits\|Error" "$R/tl_$vw/tc_timeline.txt" | head -6
done
pack
for r in 1 2; do
    for vw in 0 sq; do
        TENSORFOLD_TC_VWARPS=$vw timeout 130 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm \
            --streams 1,8 --prompts "" --steps 100 --out "$R/vw_${r}_$vw.md" > "$R/vw_${r}_$vw.txt" 2>&1
        echo "== 9b vwarps $vw round $r rc $? at $((SECONDS - t0)) s"
        grep -h "decode \|Error" "$R/vw_${r}_$vw.txt" | head -4
        pack
    done
done
for g in 2b 27b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --out "$R/dec_$g.md" > "$R/dec_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error" "$R/dec_$g.txt" | head -4
    pack
done
AB="TENSORFOLD_TC_WHOLE_HALF=0;TENSORFOLD_TC_WHOLE_HALF=1"
for g in 9b 2b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1 --prompts "" \
        --steps 100 --ab-env "$AB" --ab-rounds 2 --out "$R/half_$g.md" > "$R/half_$g.txt" 2>&1
    echo "== half $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error" "$R/half_$g.txt" | head -6; pack
done
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Prepared in session 45 for session 46 (an H200 if one comes; about 9 minutes on a fresh machine).
# (1) GPU bits of session 45's completion (division-free indexing; its forms test passed on an H100 at 8500bfb) and
#     of session 44's x preparation for live rows (its test's _run fixed in 8500bfb, never run to its end).
# (2) Issue 3's kernel table on the H200 with the new completion (session 44's: heads 1.73x at 8 rows, 27B down
#     1.51-1.54x). Predicted: heads about 1.3x, 27B down about 1.35x.
# (3) The decode A/B of TENSORFOLD_GEMV3_XLIVE (session 44's plan) at 9B / 27B / 2B, 200 steps. Compare the
#     one-stream figures also with session 44's H200 (2B 853-854, 9B 399.3-401.0, 27B 150.4): the completion is
#     predicted +0.4 % at 2B one stream, +2 % at eight streams (the head), smaller at 9B / 27B.
. benchmarks/_dec.sh
out_dir s46a
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm_w 2b 9b 27b &
ptest cmpf 300 tests/kernels/test_gpu_qgemv.py -k "completion_forms or x_live" -s &
ptest qrows 300 tests/kernels/test_gpu_qgemv.py -k "real_shapes_rows or bf16_x or deferred" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
mkdir -p /tmp/tfm && mv /tmp/tfm_w/* /tmp/tfm/ 2>/dev/null
timeout 200 python3 benchmarks/bench_kernels.py --only decode --no-b --out "$R" > "$R/kern.txt" 2>&1
echo "== kernels rc $? at $((SECONDS - t0)) s"; grep -h "head\|mlp down" "$R/kern.txt" | head -12; pack
for g in 9b 27b 2b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 200 --ab-env "TENSORFOLD_GEMV3_XLIVE=0;TENSORFOLD_GEMV3_XLIVE=1" --ab-rounds 2 \
        --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_$g.txt" | head -8; pack
done
echo "== done at $((SECONDS - t0)) s"

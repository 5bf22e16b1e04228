#!/usr/bin/env bash
# Session 46, call 2 (fresh machine): the batched completion's partial loads past the last chunk predicated off in
# plain kernels (TENSORFOLD_GEMV3_CPRED=1, the new default) instead of clamped to the last chunk and loaded again
# (0, the old form): at ks 2 (2B head) a 4 x 8 pass made 8 loads an output for 2. (1) GPU bits: the completion-form
# test with the clamped set added, the real-shape rows / bf16-x / deferred tests; (2) qgemv timelines, 0 vs 1, at
# the 2B head and 27B down, 1 and 8 rows; (3) the 2B decode A/B 0 vs 1. Predicted (H100): head 8 rows
# 139 -> 125-130 µs, 1 row 108 -> 104-106; 27B down small; 2B decode +0.2 % at one stream, +0.5-1 % at eight.
. benchmarks/_dec.sh
out_dir s46b
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 2b 9b 27b &
ptest cmpf 330 tests/kernels/test_gpu_qgemv.py -k "completion_forms" -s &
ptest qrows 330 tests/kernels/test_gpu_qgemv.py -k "real_shapes_rows or bf16_x or deferred" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
for c in 0 1; do
    mkdir -p "$R/tl$c"
    TENSORFOLD_GEMV3_CPRED=$c timeout 100 python3 benchmarks/qgemv_timeline.py --shapes 248320x2048,5120x17408 \
        --rows 1,8 --out "$R/tl$c" > "$R/tl$c.txt" 2>&1
    echo "== timeline CPRED=$c rc $? at $((SECONDS - t0)) s"; grep -h "us per launch" "$R/tl$c.txt" | head -12; pack
done
timeout 120 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 200 --ab-env "TENSORFOLD_GEMV3_CPRED=0;TENSORFOLD_GEMV3_CPRED=1" --ab-rounds 2 \
    --out "$R/ab_2b.md" > "$R/ab_2b.txt" 2>&1
echo "== ab 2b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_2b.txt" | head -8; pack
echo "== done at $((SECONDS - t0)) s"

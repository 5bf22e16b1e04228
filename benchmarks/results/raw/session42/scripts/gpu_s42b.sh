#!/usr/bin/env bash
# Session 42, call 2: the final code (TENSORFOLD_TC_WHOLE=1 the default; the GDN cluster tail removed; early gate
# loads). (1) GPU tier: run-ahead + backend parity, graphs, attention + GEMV (not the variants) + fused GDN + the
# SwiGLU GEMV. (2) 2B decode, one process, TC_WHOLE sq vs 1 (the default) over two
# rounds, without the cluster tail this time: predicted +4 to +5 % at one stream (call 1: +5 % with it).
# (3) 9B and 27B decode at the defaults (1 and 8 streams).
. benchmarks/_dec.sh
out_dir s42b
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
ptest ahead 200 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest graphs 200 tests/runtime/test_gpu_graphs.py -s &
ptest gemv 220 tests/kernels/test_gpu_attention.py tests/kernels/test_gpu_gemv.py tests/kernels/test_gpu_fused.py \
    tests/kernels/test_gpu_glu.py -k "not variants" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
timeout 120 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 100 --ab-env "TENSORFOLD_TC_WHOLE=sq;TENSORFOLD_TC_WHOLE=1" --ab-rounds 2 --out "$R/ab_2b.md" \
    > "$R/ab_2b.txt" 2>&1
echo "== ab 2b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_2b.txt" | head -8; pack
for g in 9b 27b; do
    timeout 170 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --out "$R/dec_$g.md" > "$R/dec_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:\|loaded" "$R/dec_$g.txt" | head -4; pack
done
echo "== done at $((SECONDS - t0)) s"

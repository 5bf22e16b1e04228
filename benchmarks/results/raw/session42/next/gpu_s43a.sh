#!/usr/bin/env bash
# Prepared in session 42 for session 43 (the copy of session 42 call 2's script): the GPU tier of session 42's final code
# (TENSORFOLD_TC_WHOLE=1 the default, early GDN gate loads), the 2B A/B TC_WHOLE sq vs 1 (session 42 call 1: +5 % at
# one stream on an H100, measured with the since-removed cluster tail on both sides), then 9B and 27B at the defaults.
# On an H200 the one-stream figures are issues 3 / 4's.
. benchmarks/_dec.sh
out_dir s43a
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

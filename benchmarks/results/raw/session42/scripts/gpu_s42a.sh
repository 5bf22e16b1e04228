#!/usr/bin/env bash
# Session 42, call 1. One process per geometry, four kernel settings alternated over two rounds (bench_decode
# --ab-env), tok/s at 1 and 8 streams (the fused GDN step runs only at <= 2 rows: eight streams are a control):
#   late   : the fused GDN step as before session 42 (gate inputs a / b loaded after the conv's barrier)
#   early  : the default now (a / b loaded before the conv's loads; same bits). Predicted +0.3 to +0.9 % at one
#            stream (one L2 round trip, ~0.5-0.7 us, off each GDN layer: 2B 18, 9B 24 layers a step)
#   notail : DIAGNOSTIC, wrong results: the fused step without its arrival fence / counter / gated norm. The
#            upper bound of what removing the tail could give (a cluster-based norm would keep part of it)
#   half   : early + TENSORFOLD_TC_WHOLE_HALF=1 (session 41, unmeasured): predicted 9B one stream +0.5 to +1 %
# Then the GPU tier: run-ahead + backend parity, graphs, attention + GEMV (not the variants) + fused GDN kernels.
. benchmarks/_dec.sh
out_dir s42a
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
AB="TENSORFOLD_GDN_DIAG=late;TENSORFOLD_GDN_DIAG=early;TENSORFOLD_GDN_DIAG=notail;TENSORFOLD_TC_WHOLE_HALF=1"
for g in 9b 2b; do
    timeout 230 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --ab-env "$AB" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|wrote\|loaded" "$R/ab_$g.txt" | head -20; pack
done
ptest ahead 200 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest graphs 200 tests/runtime/test_gpu_graphs.py -s &
ptest gemv 200 tests/kernels/test_gpu_attention.py tests/kernels/test_gpu_gemv.py tests/kernels/test_gpu_fused.py -k "not variants" -s &
wait
pack
echo "== done at $((SECONDS - t0)) s"

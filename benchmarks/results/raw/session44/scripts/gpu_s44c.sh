#!/usr/bin/env bash
# Session 44, call 3: the final code, with TENSORFOLD_TC_XFRAG=ns the default (x's fragments made once a block on the
# non-square whole launches, the 2B in_proj / q/k/v / down; the LOP3 decode on every launch of the plan's kernel;
# the square whole launches unchanged). (1) GPU tier: run-ahead + backend parity, graphs, attention + GEMV (with the
# xfrag / lop3 tests, not the variants) + fused GDN + the SwiGLU GEMV. (2) Decode A/B, one process a geometry, two
# rounds: 2B 0 / ns / 1, 9B 0 / ns. Predicted: 2B ns >= 1 >= 0 by 0.5-1.5 % at one stream (call 1's timeline: the
# 2B square launch lost 0.5 us with xf); 9B ns == 0 at one stream (the same kernels), eight streams a tie. Also 9B
# with the square launch at 2 tiles x 8 warps (TENSORFOLD_TC_GEO=4096x4096=2,8; whole form, no xf under ns), never
# timed in decode: its 256-thread blocks at 128 registers can sit beside the GDN step's and the norm's blocks under
# PDL where the 512-thread ones cannot (call 2: with xf, 2 x 8 +0.3 % against 2 x 16). Predicted 0 to +0.5 %.
# (3) 27B at the defaults.
. benchmarks/_dec.sh
out_dir s44c
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
( for g in 2b 9b 27b; do
    python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_decode import write_synth_any; \
write_synth_any('$g', '/tmp/tfm_w/synth-$g-4bit-g64', bits=4, group_size=64)" > "$R/synth_$g.txt" 2>&1 &
  done; wait ) &
ptest ahead 220 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest graphs 220 tests/runtime/test_gpu_graphs.py -s &
ptest gemv 260 tests/kernels/test_gpu_attention.py tests/kernels/test_gpu_gemv.py tests/kernels/test_gpu_fused.py \
    tests/kernels/test_gpu_glu.py -k "not variants" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
mkdir -p /tmp/tfm && mv /tmp/tfm_w/* /tmp/tfm/ 2>/dev/null
timeout 130 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 100 --ab-env "TENSORFOLD_TC_XFRAG=0;TENSORFOLD_TC_XFRAG=ns;TENSORFOLD_TC_XFRAG=1" --ab-rounds 2 \
    --out "$R/ab_2b.md" > "$R/ab_2b.txt" 2>&1
echo "== ab 2b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_2b.txt" | head -12; pack
timeout 140 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 100 --ab-env "TENSORFOLD_TC_XFRAG=0;TENSORFOLD_TC_XFRAG=ns;TENSORFOLD_TC_XFRAG=ns TENSORFOLD_TC_GEO=4096x4096=2,8" \
    --ab-rounds 2 \
    --out "$R/ab_9b.md" > "$R/ab_9b.txt" 2>&1
echo "== ab 9b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_9b.txt" | head -8; pack
timeout 80 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 100 --out "$R/dec_27b.md" > "$R/dec_27b.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:\|loaded" "$R/dec_27b.txt" | head -4; pack
echo "== done at $((SECONDS - t0)) s"

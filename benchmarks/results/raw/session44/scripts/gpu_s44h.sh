#!/usr/bin/env bash
# Session 44, the last call: the final code (TENSORFOLD_TC_XFRAG=1 and TENSORFOLD_GEMV3_XLIVE=1 the defaults).
# (1) GPU tier: qgemv at real shapes with the new XLIVE test; run-ahead + backend parity (the logprobs test's new
# alternatives check); graphs + the first GEMV's xfrag / lop3 / whole tests + the SwiGLU GEMV.
# (2) Decode A/B of XLIVE 0 / 1 (one process a geometry, two rounds, 100 steps): the x preparation of a one-row qgemv
# launch made all four rows' items; now only the live row's (about 100 fewer SASS instructions in the 9B gate | up
# kernel's x preparation, and a warp of dead items skips them). Predicted one stream: 9B +0.5 to +1 % (97 qgemv
# launches a step), 2B +0.1 to +0.3 % (one qgemv launch, the head), 27B +0.3 to +0.8 %; eight streams unchanged.
. benchmarks/_dec.sh
out_dir s44h
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
( for g in 2b 9b; do
    python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_decode import write_synth_any; \
write_synth_any('$g', '/tmp/tfm_w/synth-$g-4bit-g64', bits=4, group_size=64)" > "$R/synth_$g.txt" 2>&1 &
  done; wait ) &
ptest qgemv 190 tests/kernels/test_gpu_qgemv.py -k "x_live or real_shapes_rows or bf16_x" -s &
ptest ahead 140 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest gemv 170 tests/runtime/test_gpu_graphs.py tests/kernels/test_gpu_gemv.py tests/kernels/test_gpu_glu.py \
    -k "xfrag or lop3 or whole or graph or glu" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
mkdir -p /tmp/tfm && mv /tmp/tfm_w/* /tmp/tfm/ 2>/dev/null
for g in 9b 2b; do
    timeout 80 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --ab-env "TENSORFOLD_GEMV3_XLIVE=0;TENSORFOLD_GEMV3_XLIVE=1" --ab-rounds 2 \
        --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_$g.txt" | head -8; pack
done
echo "== done at $((SECONDS - t0)) s"

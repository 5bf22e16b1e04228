#!/usr/bin/env bash
# Prepared in session 44 for session 45 (an H200 if one comes; about 7 minutes on a fresh machine).
# (1) qgemv's x preparation for the launch's rows only (TENSORFOLD_GEMV3_XLIVE=1, off by default; same bits): its
#     GPU test (compiles both forms: give it 300 s on a fresh machine), then the decode A/B at 9B, 27B and 2B (one
#     process a geometry, two rounds, 200 steps). Predicted at one stream on the H200: 9B +0.5 to +1 % (97 qgemv
#     launches a step), 27B +0.3 to +0.8 %, 2B about 0 (one qgemv launch, the head); eight streams unchanged.
# (2) The GPU tier's slow files that session 44 could not finish: test_gpu_qgemv.py (bf16_x) and the first
#     GEMV's tests at the final defaults (TENSORFOLD_TC_XFRAG=1).
. benchmarks/_dec.sh
out_dir s45a
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
( for g in 2b 9b 27b; do
    python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_decode import write_synth_any; \
write_synth_any('$g', '/tmp/tfm_w/synth-$g-4bit-g64', bits=4, group_size=64)" > "$R/synth_$g.txt" 2>&1 &
  done; wait ) &
ptest qgemv 300 tests/kernels/test_gpu_qgemv.py -k "x_live or real_shapes_rows or bf16_x" -s &
ptest gemv 260 tests/runtime/test_gpu_graphs.py tests/kernels/test_gpu_gemv.py tests/kernels/test_gpu_glu.py \
    -k "xfrag or lop3 or whole or graph or glu" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
mkdir -p /tmp/tfm && mv /tmp/tfm_w/* /tmp/tfm/ 2>/dev/null
for g in 9b 27b 2b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 200 --ab-env "TENSORFOLD_GEMV3_XLIVE=0;TENSORFOLD_GEMV3_XLIVE=1" --ab-rounds 2 \
        --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_$g.txt" | head -8; pack
done
echo "== done at $((SECONDS - t0)) s"

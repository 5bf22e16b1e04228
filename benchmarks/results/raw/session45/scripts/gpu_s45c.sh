#!/usr/bin/env bash
# Session 45, first H200 call: the completion's wide plain form (TENSORFOLD_GEMV3_CMPU=auto: 16x4 past 64 outputs;
# auto31: session 31's 4x8). (1) GPU bits: the new test at the 2B head / 27B down and the real-shape row tests;
# (2) the 2B decode A/B (its one qgemv launch a step is the head: ks 2, about 20 tiles a warp), 1 and 8 streams;
# (3) the head and 27B down timelines at 1 / 8 rows under the new default. Predicted: the 2B head at 8 rows
# 151 -> 100-115 µs (its completion tail 23-63 µs -> under 10), 2B decode at 8 streams +2-4 %, at one stream
# +0.3-0.6 % (one row: 3 passes -> 1).
. benchmarks/_dec.sh
out_dir s45c
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
( for g in 2b 9b 27b; do
    python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_decode import write_synth_any; \
write_synth_any('$g', '/tmp/tfm_w/synth-$g-4bit-g64', bits=4, group_size=64)" > "$R/synth_$g.txt" 2>&1 &
  done; wait ) &
ptest cmpf 300 tests/kernels/test_gpu_qgemv.py -k "completion_forms" -s &
ptest qrows 300 tests/kernels/test_gpu_qgemv.py -k "real_shapes_rows or bf16_x or x_live" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
mkdir -p /tmp/tfm && mv /tmp/tfm_w/* /tmp/tfm/ 2>/dev/null
timeout 150 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 200 --ab-env "TENSORFOLD_GEMV3_CMPU=auto31;TENSORFOLD_GEMV3_CMPU=auto" --ab-rounds 2 \
    --out "$R/ab_2b.md" > "$R/ab_2b.txt" 2>&1
echo "== ab 2b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_2b.txt" | head -8; pack
left=$((560 - (SECONDS - t0)))
[ $left -gt 60 ] && timeout $left python3 benchmarks/qgemv_timeline.py --shapes 248320x2048,5120x17408 --rows 1,8 \
    --out "$R" > "$R/tl.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; pack

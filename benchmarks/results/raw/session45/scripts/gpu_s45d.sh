#!/usr/bin/env bash
# Session 45, call 3: the completion without a division or a bit loop an output (tile ordinal and rest carried from
# output to output, the tile's position taken by a shuffle from the lane that searched for it). Call 2 showed the
# wide 16x4 form alone changed nothing (the head's eight-row tail 23-63 -> 25-51 µs): the outputs' index arithmetic,
# not the round trips, was the cost. (1) GPU bits (the completion forms at the 2B head / 27B down; the x-live test
# with its _run fixed); (2) the timelines at 1 / 8 rows; (3) the 2B decode A/B at 1 and 8 streams. Predicted: the
# head's eight-row tail under 10 µs (launch 158 -> 120-130 µs on the H100), 2B at eight streams +1.5-3 %.
. benchmarks/_dec.sh
out_dir s45d
t0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_decode import write_synth_any; \
write_synth_any('2b', '/tmp/tfm/synth-2b-4bit-g64', bits=4, group_size=64)" > "$R/synth_2b.txt" 2>&1 &
ptest cmpf 240 tests/kernels/test_gpu_qgemv.py -k "completion_forms" -s
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
timeout 150 python3 benchmarks/qgemv_timeline.py --shapes 248320x2048,5120x17408 --rows 1,8 --out "$R" > "$R/tl.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; pack
timeout 150 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 200 --ab-env "TENSORFOLD_GEMV3_CMPU=auto31;TENSORFOLD_GEMV3_CMPU=auto" --ab-rounds 2 \
    --out "$R/ab_2b.md" > "$R/ab_2b.txt" 2>&1
echo "== ab 2b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_2b.txt" | head -8; pack

#!/usr/bin/env bash
# Session 51, call 3. Call 2: a 16-row launch (two n-tiles, 190 registers, 2 blocks an SM resident) cost more than
# two 8-row launches (9B in_proj 37.5 vs 33.6 us). The plan's grid is 3 blocks an SM (396), so a third of the blocks
# ran as a second wave. Now 16-row launches are sized for 2 blocks an SM (TENSORFOLD_GEMV3_NT2OCC, default 2; 3 =
# call 2's geometry). Predicted: 9B in_proj at 16 rows 37.5 -> 22-26 us; 9B 32 streams 2,569 -> 3,000-3,400 tok/s.
# (1) the 16-row bit test with the new grid; (2) the 9B decode GEMVs at 8 / 16 rows, R16 on, occupancy 3 vs 2;
# (3) 9B decode at 16 / 32 streams, R16 off vs on (occupancy 2), one process, two rounds.
. benchmarks/_dec.sh
out_dir s51c
t0=$SECONDS
LIMIT=${LIMIT:-360}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 9b > /dev/null 2>&1 &
ptest r16 120 tests/kernels/test_gpu_qgemv.py -k sixteen -s
for occ in 3 2; do
    mkdir -p "$R/kern_occ$occ"
    TENSORFOLD_GEMV3_R16=1 TENSORFOLD_GEMV3_NT2OCC=$occ timeout 90 python3 benchmarks/bench_kernels.py --only decode \
        --no-b --pdl --models 9B --rows 8,16 --out "$R/kern_occ$occ" > "$R/kern_occ$occ.txt" 2>&1
    echo "== kern occ $occ rc $? at $((SECONDS - t0)) s"; grep -h "^decode" "$R/kern_occ$occ.txt" | cut -c1-110; pack
done
wait  # the synth checkpoint
left=$((LIMIT - (SECONDS - t0) - 5))
timeout $left python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 16,32 --prompts "" \
    --steps 40 --ab-env "TENSORFOLD_GEMV3_R16=0;TENSORFOLD_GEMV3_R16=1" --ab-rounds 2 \
    --out "$R/r16_9b.md" > "$R/r16_9b.txt" 2>&1
echo "== r16 9b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/r16_9b.txt" | cut -c1-120 | head -12
echo "== done at $((SECONDS - t0)) s"; pack

#!/usr/bin/env bash
# Prepared in session 51 for session 52 (first call, a fresh machine, LIMIT ~540; an H200 if one comes).
# Session 51 (H100) made 16-row qgemv launches the default (two n-tiles of 8 bf16-x rows, one weight read, sized for
# the 2 blocks an SM their 190 registers allow): 9B at 16 / 32 streams +8 / +10 %. A 16-row launch still costs
# 1.6-1.9x an 8-row one (9B in_proj 30.5 vs 18.0 us): at 2 blocks an SM it has two thirds of the warps, hence of the
# weight loads in flight.
# (1) the 16-row GPU bit test with load depth 2 (TENSORFOLD_GEMV3_NT2DEPTH=2, opt-in, ad294d1, never run on a GPU).
# (2) the 9B decode GEMVs at 8 / 16 rows, depth 1 vs 2 (separate processes). Predicted: in_proj 30.5 -> 21-24 us.
# (3) 9B and 27B decode at 16 / 32 streams, depth 1 vs 2 (one process each, two rounds); 27B also R16 off vs on
#     (never timed at 27B). Predicted 9B 32 streams 2,825 -> 3,100-3,400 tok/s on an H100.
# (4) issue 3's floor table (`--floor`) at 9B / 27B: never run on the H200 (session 51 ran it on the H100).
. benchmarks/_dec.sh
begin s52a 9b 27b
TENSORFOLD_GEMV3_NT2DEPTH=2 ptest d2 150 tests/kernels/test_gpu_qgemv.py -k sixteen -s
for d in 1 2; do
    mkdir -p "$R/kern_d$d"
    TENSORFOLD_GEMV3_NT2DEPTH=$d timeout 100 python3 benchmarks/bench_kernels.py --only decode --no-b --pdl \
        --models 9B --rows 8,16 --out "$R/kern_d$d" > "$R/kern_d$d.txt" 2>&1
    echo "== kern depth $d rc $? at $((SECONDS - t0)) s"; grep -h "R=16" "$R/kern_d$d.txt" | cut -c1-110; pack
done
wait  # the synth checkpoints
for g in 9b 27b; do
    ab="TENSORFOLD_GEMV3_NT2DEPTH=1;TENSORFOLD_GEMV3_NT2DEPTH=2"
    [ $g = 27b ] && ab="TENSORFOLD_GEMV3_R16=0;TENSORFOLD_GEMV3_R16=1;TENSORFOLD_GEMV3_R16=1 TENSORFOLD_GEMV3_NT2DEPTH=2"
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 16,32 --prompts "" \
        --steps 40 --ab-env "$ab" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/ab_$g.txt" | cut -c1-120 | head -14; pack
done
left=$((LIMIT - (SECONDS - t0) - 10))
[ "$left" -gt 60 ] && { mkdir -p "$R/floor"; timeout "$left" python3 benchmarks/bench_kernels.py --only decode --no-b \
    --pdl --floor --models 9B,27B --out "$R/floor" > "$R/floor.txt" 2>&1;
    echo "== floor rc $? at $((SECONDS - t0)) s"; grep -h "R=1 " "$R/floor.txt" | cut -c1-110; }
echo "== done at $((SECONDS - t0)) s"; pack

#!/usr/bin/env bash
# Session 52, call 2 (a fresh machine, LIMIT ~450): the new qgemv defaults (e22b4db: 32-row launches and load depth 2
# in 16-row launches) against the old ones (R32=0, NT2DEPTH=1), with the GPU bit tests on the new defaults.
# Predictions (call 1's separate A/Bs, H100): 9B 16 streams ~2,580 -> ~2,735, 32 streams ~2,820 -> ~3,020 (R32 alone
# and depth 2 alone gave the same 32-stream figure: with R32 on, 17-32 rows take no 16-row launch, so no sum);
# 24 streams (24 rows in a four-n-tile launch) about the 32-stream step time; 27B 32 streams 784 -> ~869.
. benchmarks/_dec.sh
begin s52b 9b 27b 2b
ptest bits 220 tests/kernels/test_gpu_qgemv.py -k wide_row -s &
ptest graphs 220 tests/runtime/test_gpu_graphs.py tests/runtime/test_gpu_graphs_large.py -k "not 27b" &
wait
echo "== tests at $((SECONDS - t0)) s"
old="TENSORFOLD_GEMV3_R32=0 TENSORFOLD_GEMV3_NT2DEPTH=1"
for g in 9b 27b 2b; do
    ab="$old;TENSORFOLD_GEMV3_R32=1"; st=16,24,32
    [ $g = 27b ] && { ab="$old;TENSORFOLD_GEMV3_R16=0;TENSORFOLD_GEMV3_R32=1"; st=16,32; }
    [ $g = 2b ] && st=16,32
    left=$((LIMIT - (SECONDS - t0) - 5)); [ "$left" -lt 60 ] && break
    timeout $((left < 150 ? left : 150)) python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm \
        --streams $st --prompts "" --steps 40 --ab-env "$ab" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/ab_$g.txt" | cut -c1-120 | head -20; pack
done
echo "== done at $((SECONDS - t0)) s"; pack

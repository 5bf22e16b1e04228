#!/usr/bin/env bash
# session 53 call 2 (warm H200): issue 3's floor table on the H200, then the GDN cap 96 decode A/B.
. benchmarks/_dec.sh
begin s53b
timeout 300 python3 benchmarks/bench_kernels.py --only decode --no-b --pdl --floor --models 9B,27B --out "$R/floor.md" > "$R/floor.txt" 2>&1
echo "== floor rc $? at $((SECONDS - t0)) s"; pack
for g in 9b 27b; do
    ab $g 16,32 120 "TENSORFOLD_GDN_STEP_REGS=0;TENSORFOLD_GDN_STEP_REGS=96" || break
done
echo "== done at $((SECONDS - t0)) s"; pack

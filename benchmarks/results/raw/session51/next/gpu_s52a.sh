#!/usr/bin/env bash
# Prepared in session 51 for session 52 (first call, a fresh machine, LIMIT ~540; an H200 if one comes).
# Session 51 (H100) made 16-row qgemv launches the default (two n-tiles of 8 bf16-x rows, one weight read, sized for
# the 2 blocks an SM their 190 registers allow): 9B at 16 / 32 streams +8 / +10 %. A 16-row launch still costs
# 1.6-1.9x an 8-row one (9B in_proj 30.5 vs 18.0 us), and at 32 rows torch's bf16 matmul beats our launches.
# Two opt-in forms, built in session 51, never run on a GPU:
#   TENSORFOLD_GEMV3_NT2DEPTH=2: two iterations of weight loads in flight a warp in 16-row launches (at 2 blocks an
#     SM a 16-row launch has two thirds of an 8-row launch's warps). Predicted 9B in_proj at 16 rows 30.5 -> 21-24 us.
#   TENSORFOLD_GEMV3_R32=1: 17-32 rows in one launch of four n-tiles (180 / 200 registers, 2 blocks an SM, 64 KB
#     of x fragments a block). Predicted 9B in_proj at 32 rows 61 (two 16-row launches) -> 40-48 us; 9B decode at
#     32 streams 2,825 -> 3,300-3,800 tok/s on an H100.
# (1) the real-shape GPU bit tests: 16 / 13 rows and 32 / 29 rows (R16, R32), and the 16-row ones at depth 2;
# (2) the 9B decode GEMVs at 16 / 32 rows with R32 on (depth 1), then 16 rows at depth 2;
# (3) 9B decode at 16 / 32 streams: default, depth 2, R32; 27B: R16 off, default, R32 (one process each, 2 rounds);
# (4) with what is left, issue 3's floor table at 9B / 27B (never run on an H200).
. benchmarks/_dec.sh
begin s52a 9b 27b
ptest bits 200 tests/kernels/test_gpu_qgemv.py -k wide_row -s &
TENSORFOLD_GEMV3_NT2DEPTH=2 ptest d2 200 tests/kernels/test_gpu_qgemv.py -k "wide_row and R16" -s &
wait  # the tests and the synth checkpoints
echo "== tests at $((SECONDS - t0)) s"
kern() {  # kern NAME ROWS [VAR=VALUE...]: the 9B decode GEMVs at ROWS under those switches
    local n=$1 rows=$2; shift 2
    mkdir -p "$R/$n"
    env "$@" timeout 100 python3 benchmarks/bench_kernels.py --only decode --no-b --pdl --models 9B --rows "$rows" \
        --out "$R/$n" > "$R/$n.txt" 2>&1
    echo "== $n rc $? at $((SECONDS - t0)) s"; grep -h "^decode" "$R/$n.txt" | cut -c1-110; pack
}
kern kern_r32 16,32 TENSORFOLD_GEMV3_R32=1
kern kern_d2 16 TENSORFOLD_GEMV3_NT2DEPTH=2
for g in 9b 27b; do
    ab="TENSORFOLD_GEMV3_R32=0;TENSORFOLD_GEMV3_NT2DEPTH=2;TENSORFOLD_GEMV3_R32=1"
    [ $g = 27b ] && ab="TENSORFOLD_GEMV3_R16=0;TENSORFOLD_GEMV3_R32=0;TENSORFOLD_GEMV3_R32=1"
    left=$((LIMIT - (SECONDS - t0) - 5)); [ "$left" -lt 90 ] && break
    timeout $((left < 170 ? left : 170)) python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm \
        --streams 16,32 --prompts "" --steps 40 --ab-env "$ab" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/ab_$g.txt" | cut -c1-120 | head -14; pack
done
left=$((LIMIT - (SECONDS - t0) - 10))
[ "$left" -gt 60 ] && { mkdir -p "$R/floor"; timeout "$left" python3 benchmarks/bench_kernels.py --only decode --no-b \
    --pdl --floor --models 9B,27B --out "$R/floor" > "$R/floor.txt" 2>&1;
    echo "== floor rc $? at $((SECONDS - t0)) s"; grep -h "R=1 " "$R/floor.txt" | cut -c1-110; }
echo "== done at $((SECONDS - t0)) s"; pack

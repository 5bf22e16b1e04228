#!/usr/bin/env bash
# Prepared in session 50 for session 51 (first call, a fresh machine, LIMIT ~540; an H200 if one comes).
# (1) issue 3's decode table with the read floor (`--floor`, fixed in 14bbf54 to read every 512-byte unit), on the
#     H200: whether a plain read of each 9B / 27B shape's bytes, chained under PDL, reaches 70 % of copy there
#     (session 50, H100: 75-93 %; qgemv 44-79 %).
# (2) the opt-in 16-row qgemv launches (TENSORFOLD_GEMV3_R16=1, 4179f9f, never run on a GPU): the GPU bit test at
#     real shapes, then 9B decode at 8 / 16 / 32 streams, off vs on in one process (two rounds), with the 9B decode
#     graphs == eager test after it. Predicted: 32 streams 2,543 -> 3,500-4,500 tok/s (H100; the weights read twice
#     a step, not four times), 16 streams up by a similar share, 8 streams unchanged (no launch changes).
# (3) the 27B out_proj / o_proj (5120 x 6144) at cg 24 (ks 4: one (tile, chunk) item a warp; the default cg 16 /
#     ks 6 gives 56 of 264 warps a chunk a second item): in the kernel table, then 27B decode in separate processes
#     (the plan is made at load). Session 23 timed cg 8 / 16 / 32 there (15.1 / 14.0 / 13.4 µs at one row), never
#     24; session 35 saw cg 32 lose end to end (143.4 vs 148.6 tok/s). Predicted: 12-12.5 µs at one row.
# (4) what time is left: the GPU tests session 50 could not finish (test_gpu_graphs.py, test_gpu_qgemv.py).
. benchmarks/_dec.sh
out_dir s51a
t0=$SECONDS
LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 9b 27b > /dev/null 2>&1 &
mkdir -p "$R/kern" "$R/kern_cg24"
timeout 150 python3 benchmarks/bench_kernels.py --only decode --no-b --pdl --floor --out "$R/kern" > "$R/kern.txt" 2>&1
echo "== kern rc $? at $((SECONDS - t0)) s"; grep -h "R=1" "$R/kern.txt" | grep "9B\|27B" | cut -c1-120; pack
ptest r16 150 tests/kernels/test_gpu_qgemv.py -k sixteen -s
wait
timeout 200 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 8,16,32 --prompts "" \
    --steps 60 --ab-env "TENSORFOLD_GEMV3_R16=0;TENSORFOLD_GEMV3_R16=1" --ab-rounds 2 \
    --tests "-m gpu -q -p no:cacheprovider -rfE tests/runtime/test_gpu_graphs_large.py -k 9b -s" \
    --out "$R/r16_9b.md" > "$R/r16_9b.txt" 2>&1
echo "== r16 9b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|passed\|failed\|rror" "$R/r16_9b.txt" | cut -c1-140 | head -16; pack
TENSORFOLD_GEMV3_CG=5120x6144=24 timeout 100 python3 benchmarks/bench_kernels.py --only decode --no-b --pdl \
    --out "$R/kern_cg24" > "$R/kern_cg24.txt" 2>&1
echo "== kern cg24 rc $? at $((SECONDS - t0)) s"; grep -h "5120x6144" "$R/kern_cg24.txt" | cut -c1-120; pack
for cg in "" 5120x6144=24; do
    left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 90 ] && break
    n=dec27${cg:+_cg24}
    TENSORFOLD_GEMV3_CG=$cg timeout 100 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm \
        --streams 1,8 --prompts "" --steps 100 --out "$R/$n.md" > "$R/$n.txt" 2>&1
    echo "== $n rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/$n.txt" | cut -c1-120 | head -3; pack
done
left=$((LIMIT - (SECONDS - t0) - 10))
[ "$left" -gt 60 ] && { ptest graphs "$left" tests/runtime/test_gpu_graphs.py -s &
                        ptest qg "$left" tests/kernels/test_gpu_qgemv.py -s & wait; }
echo "== done at $((SECONDS - t0)) s"; pack

#!/usr/bin/env bash
# Session 51, call 2. Call 1 (gpu_s51a.sh = session 50's plan): the 16-row qgemv launches (TENSORFOLD_GEMV3_R16=1)
# kept their bits but did not move 9B decode (32 streams 2,569 -> 2,529 tok/s; 16 streams 2,396 -> 2,371). So a
# 16-row launch costs about what two 8-row launches do, and the weight read is not what a row above 8 costs.
# (1) the 9B decode GEMVs at 1 / 8 / 16 / 32 rows, R16 off and on (separate processes): the per-launch cost of rows.
# (2) where a 9B step goes at 8 / 16 / 32 streams (--profile: each recorded launch replayed alone), R16 off, then
#     16 / 32 with R16 on.
# (3) time left: the GPU tests session 50 cut (test_gpu_graphs.py, test_gpu_qgemv.py).
. benchmarks/_dec.sh
out_dir s51b
t0=$SECONDS
LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 9b > /dev/null 2>&1 &
for r16 in 0 1; do
    mkdir -p "$R/kern_r16_$r16"
    TENSORFOLD_GEMV3_R16=$r16 timeout 110 python3 benchmarks/bench_kernels.py --only decode --no-b --pdl --models 9B \
        --rows 1,8,16,32 --out "$R/kern_r16_$r16" > "$R/kern_r16_$r16.txt" 2>&1
    echo "== kern r16=$r16 rc $? at $((SECONDS - t0)) s"; grep -h "^decode" "$R/kern_r16_$r16.txt" | cut -c1-110; pack
done
wait
for r16 in 0 1; do
    prof=$([ $r16 = 0 ] && echo 8,16,32 || echo 16,32)
    TENSORFOLD_GEMV3_R16=$r16 timeout 130 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm \
        --streams 32 --prompts "" --steps 40 --profile $prof --out "$R/prof_r16_$r16.md" > "$R/prof_r16_$r16.txt" 2>&1
    echo "== prof r16=$r16 rc $? at $((SECONDS - t0)) s"; grep -h "profile\|decode " "$R/prof_r16_$r16.txt" | cut -c1-120; pack
done
left=$((LIMIT - (SECONDS - t0) - 10))
[ "$left" -gt 60 ] && { ptest graphs "$left" tests/runtime/test_gpu_graphs.py -s &
                        ptest qg "$left" tests/kernels/test_gpu_qgemv.py -s & wait; }
echo "== done at $((SECONDS - t0)) s"; pack

#!/usr/bin/env bash
# Prepared in session 42. Second call of session 43 (about 8 minutes warm; run right after gpu_s43a.sh so the
# machine is still warm): the broad GPU tier of the code (run-ahead + backend parity, graphs, attention + GEMV),
# with the cluster tail on if gpu_s43a showed it correct and faster (pass CLUSTER=1 in the environment of the run
# command), then 27B one-stream figures with and without the cluster tail, and the 9B 4096 x 4096 timeline with the
# half-share form (session 41's --half, never run).
. benchmarks/_dec.sh
out_dir s43b
t0=$SECONDS
export TENSORFOLD_GDN_CLUSTER=${CLUSTER:-0}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
ptest ahead 200 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest graphs 200 tests/runtime/test_gpu_graphs.py -s &
ptest gemv 200 tests/kernels/test_gpu_attention.py tests/kernels/test_gpu_gemv.py -k "not variants" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
timeout 200 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 60 --ab-env "TENSORFOLD_GDN_CLUSTER=0;TENSORFOLD_GDN_CLUSTER=1" --ab-rounds 2 --out "$R/ab_27b.md" \
    > "$R/ab_27b.txt" 2>&1
echo "== ab 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:\|wrote\|loaded" "$R/ab_27b.txt" | head -12; pack
mkdir -p "$R/tl"
timeout 80 python3 benchmarks/tc_timeline.py --shapes 4096x4096 --whole --half --out "$R/tl" > "$R/tl/tc_timeline.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us per launch\|same bits\|Error" "$R/tl/tc_timeline.txt" | head -6
pack
echo "== done at $((SECONDS - t0)) s"

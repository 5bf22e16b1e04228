#!/usr/bin/env bash
# Session 39, call 3: the GPU tier of the session's last code (7981fb4: the fused attention merge removed, the ids
# chain inside the step graphs on by default, the first kernel's L2 prefetch opt-in), four pytest processes side
# by side (compiles are CPU-bound, nothing timed): run-ahead + backend parity (now with the in-graph chain), the
# graph tests, the attention kernels (after the revert), and session 37's owed NORM-fusion kernel tier at 27B.
# Then (GEOMS, empty after a lost call left 574 s of budget) the decode table (1 / 8 / 32 streams). The NORM
# tier only with FUSE=1.
. benchmarks/_dec.sh
out_dir s39f
t0=$SECONDS
ptest ahead 210 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
ptest graphs 210 tests/runtime/test_gpu_graphs.py -s &
ptest attn 210 tests/kernels/test_gpu_attention.py -s &
[ "${FUSE:-0}" = 1 ] && ptest fuse 280 tests/kernels/test_gpu_norm_fuse.py -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
for g in ${GEOMS:-}; do
    timeout ${TLIM:-130} python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8,32 --prompts "" \
        --steps 100 --out "$R/table_$g.md" > "$R/table_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode " "$R/table_$g.txt" | head -4; pack
done
echo "== done at $((SECONDS - t0)) s"

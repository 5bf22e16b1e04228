#!/usr/bin/env bash
# Prepared in session 16 for the next session's first device call (one GPU): what session 16 could not run.
# - The runtime GPU tier at the final plans (pipe2 for K <= 2,048; qgemv for 5120 x 6144).
# - 27B decode at 1 / 8 streams with them (estimated about 0.3 ms a step faster than call 5's 109.1 tok/s).
# (9B decode and prompts with the bf16 prompt GEMM default: gpu_s17b.sh, a second call; they do not fit this one.)
# - The 9B out_proj / o_proj shape (4096 x 4096, 32 launches a step on "pipe") against first-kernel overrides.
. benchmarks/_dec.sh
out_dir s17a
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime >"$R/rt_tests.txt" 2>&1
echo "== runtime tests rc $?"; tail -n 2 "$R/rt_tests.txt"; pack
timeout 60 python3 benchmarks/bench_gemv3.py --rows 1,8 --shapes - --custom "4096,4096" --configs ";" \
    --tcplans "pipe:u=2;pipe:mt=1;pipe:mt=1,u=2;w16:u=4;pipe2:depth=2" --out "$R/g44" >"$R/g44.txt" 2>&1
echo "== g44 rc $?"; grep -E " us " "$R/g44.txt"; pack
dec 27b 27b; pack


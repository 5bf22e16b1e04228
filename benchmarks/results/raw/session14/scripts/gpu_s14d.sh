#!/usr/bin/env bash
# Session 14, call 4 (one GPU), from a `git archive` of the default code: issue 4's whole matrix at 2B (decode at
# 1 / 8 / 32 streams, prompts of 512 / 4,096 / 16,384 tokens, the transformers + fla peer beside it in the same
# process), then the runtime GPU tier (graph == eager, alone == batched, window == steps, commit == stepping, prompt
# vs step), the PDL decode test (the review mend's host side) and the qgemv prefetch form's GPU test.
set -u
OUT=${OUT:-/tmp/s14d}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=/tmp/tfkc
(which ncu nsys nvidia-smi; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv) >"$R/tools.txt" 2>&1
full() {  # geometry timeout
    timeout "$2" python3 benchmarks/bench_decode.py --geometry "$1" --root /tmp/tfm --streams 1,8,32 \
        --prompts 512,4096,16384 --steps 30 --peer --peer-streams 1,8,32 --peer-prompts 512,4096,16384 \
        --out "$R/full_$1.md" >"$R/full_$1.txt" 2>&1
    echo "== full $1 rc $?"; grep -h "decode \|prompt \|failed\|Error" "$R/full_$1.txt" | head -20
}
full 2b 260
timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime \
    "tests/kernels/test_gpu_qgemv.py::test_prefetch_form_real_shapes" >"$R/gpu_tests.txt" 2>&1
echo "== tests rc $?"; tail -n 4 "$R/gpu_tests.txt"
tar -czf "$OUT/s14d.tar.gz" -C "$OUT" r

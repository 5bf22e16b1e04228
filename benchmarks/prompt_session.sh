#!/bin/bash
# One device call of helper PROMPT (2026-11-30): prompt profile at 2B (old inter pass, new widths, prompt graphs,
# graphed-vs-eager check), the GPU tier of the changed kernels, bench_decode's prompt rows. Logs go to $OUT as they
# are written. Usage (after the device preamble): OUT=... TF_COMMIT=... bash benchmarks/prompt_session.sh
set -u
OUT=${OUT:-/tmp/out}
ROOT=/tmp/tfmodels
T0=$(date +%s)
left() { echo $(( ${BUDGET:-285} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
timeout 170 python3 benchmarks/profile_prompt.py --geometry 2b --root $ROOT --tokens 512,4096 --check-graph \
    --variants "TENSORFOLD_CHUNK_INTER=32;default;TENSORFOLD_CHUNK_INTER=8;TENSORFOLD_PROMPT_GRAPH=1" \
    --out "$OUT/profile.md" > "$OUT/profile_stdout.txt" 2>&1
echo "profile exit code $? after $(( $(date +%s) - T0 )) s" >> "$OUT/profile_stdout.txt"
timeout 45 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore -rA tests/kernels/test_gpu_prompt.py \
    > "$OUT/gpu_tests.txt" 2>&1
echo "pytest exit code $? after $(( $(date +%s) - T0 )) s" >> "$OUT/gpu_tests.txt"
L=$(left)
if [ "$L" -gt 30 ]; then
    timeout "$L" python3 benchmarks/bench_decode.py --geometry 2b --root $ROOT --streams 1 --prompts 512,4096 \
        --steps 10 --out "$OUT/bench_decode.md" > "$OUT/bench_decode.txt" 2>&1
    echo "bench exit code $? after $(( $(date +%s) - T0 )) s" >> "$OUT/bench_decode.txt"
fi

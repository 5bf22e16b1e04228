#!/usr/bin/env bash
# Nsight Compute on the hot kernels (ncu is at /usr/local/cuda/bin/ncu on the device, session 14): speed of light,
# warp stall reasons, memory workload, instruction mix of the decode GEMVs at the 2B / 9B shapes and of the prompt
# GEMM at 4,096 rows (benchmarks/ncu_probe.py launches them). Written for the next GEMV attempt: it replaces the SASS
# counting estimates of sessions 11-14 with measured stalls. Counters may need admin rights; the log says so if so.
set -u
OUT=${OUT:-/tmp/ncu}
mkdir -p "$OUT"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
timeout 500 "$NCU" --target-processes all --kernel-name regex:'qgemv|tc3gemm|xprep' --launch-skip 0 --launch-count 12 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy --section InstructionStats --csv --page details \
    python3 benchmarks/ncu_probe.py --reps 1 >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
echo "ncu rc $?"; head -c 2000 "$OUT/ncu.err"; wc -l "$OUT/ncu.csv"

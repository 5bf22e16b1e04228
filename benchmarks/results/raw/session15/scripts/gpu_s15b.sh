#!/usr/bin/env bash
# Session 15, call 2 (one GPU): Nsight Compute, clocks unlocked, full section set with source counters, on the decode
# GEMVs at 2B / 9B / 27B shapes and the prompt GEMM (benchmarks/ncu_probe.py); then the report's pages printed on
# the device: per-kernel details, raw stall metrics, and per-SASS-instruction stall samples of three kernels.
set -u
OUT=${OUT:-/tmp/s15b}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=/tmp/tfkc
NCU=/usr/local/cuda/bin/ncu
$NCU --version >"$R/ncu_version.txt" 2>&1
timeout 300 $NCU --target-processes all --clock-control none --kernel-name regex:'qgemv|tc3gemm|xprep' \
    --launch-count 40 --set full --import-source no -f -o /tmp/rep \
    python3 benchmarks/ncu_probe.py --reps 0 >"$R/probe.txt" 2>&1
echo "== ncu rc $?"; tail -n 5 "$R/probe.txt"
$NCU -i /tmp/rep.ncu-rep --csv --page details >"$R/details.csv" 2>&1; echo "== details $?"
$NCU -i /tmp/rep.ncu-rep --csv --page raw --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|gpu__time_duration.sum|dram__bytes_read.sum$|smsp__inst_executed.sum$|sm__throughput.avg.pct_of_peak_sustained_elapsed|dram__throughput.avg.pct_of_peak_sustained_elapsed|smsp__issue_active.avg.pct_of_peak_sustained_active' \
    >"$R/stalls.csv" 2>&1; echo "== raw $?"; wc -c "$R"/*.csv
for k in qgemv3 qgemv_tc tc3gemm; do
    $NCU -i /tmp/rep.ncu-rep --csv --page source --print-source sass --kernel-name regex:"$k" --launch-count 1 \
        >"$R/sass_$k.csv" 2>&1
    echo "== source $k $?"; wc -c "$R/sass_$k.csv"
done
tar -czf "$OUT/s15b.tar.gz" -C "$OUT" r

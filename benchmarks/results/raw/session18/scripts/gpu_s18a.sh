#!/usr/bin/env bash
# Prepared in session 17 for the next session's first device call (one GPU): why qgemv's one-n-tile SwiGLU-epilogue
# kernel streams 22-27 % slower than the plain one with the same main loop (9B gate+up 29.0 -> 35.4 us at one row;
# ptxas: 104 against 136 registers). Nsight Compute, full set with source counters, on both forms
# (ncu_probe.py --glu), then the per-SASS-instruction pages of each to compare their loops and stalls.
. benchmarks/_dec.sh
out_dir s18a
NCU=/usr/local/cuda/bin/ncu
timeout 240 $NCU --target-processes all --clock-control none --kernel-name regex:'qgemv3' --launch-count 8 \
    --set full --import-source no -f -o /tmp/rep python3 benchmarks/ncu_probe.py --glu --reps 1 >"$R/probe.txt" 2>&1
echo "== ncu rc $?"; tail -n 4 "$R/probe.txt"
$NCU -i /tmp/rep.ncu-rep --csv --page raw --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|gpu__time_duration.sum|dram__bytes_read.sum$|smsp__inst_executed.sum$|smsp__issue_active.avg.pct_of_peak_sustained_active|launch__registers_per_thread|sm__warps_active.avg.pct_of_peak_sustained_active' \
    >"$R/stalls.csv" 2>&1; echo "== raw $?"
for n in plain glu; do
    k='qgemv3.*_d1(?!_glu)'; [ $n = glu ] && k='qgemv3.*_d1_glu'
    $NCU -i /tmp/rep.ncu-rep --csv --page source --print-source sass --kernel-name regex:"$k" --launch-count 1 \
        >"$R/sass_$n.csv" 2>&1
    echo "== source $n $?"; wc -c "$R/sass_$n.csv"
done
pack
# the per-kernel profiles of one-stream decode at 9B and 27B (where the step's time goes, session 18's plan)
dec 9b 9b --profile 1; grep -A24 "profile, 1 stream" "$R/decode_9b.txt"; pack
dec 27b 27b --profile 1; grep -A24 "profile, 1 stream" "$R/decode_27b.txt"; pack

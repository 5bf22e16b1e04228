#!/usr/bin/env bash
# Session 19, call 5 (diagnostic): a size sweep at K = 4096 (out 8192 .. 196608) of qgemv without the arithmetic
# (TENSORFOLD_GEMV3_NOC=1) and with it, one row, beside plain reads of the same sizes: the slope is the load
# pattern's streaming rate, the intercept the fixed cost (x preparation, split-K completion, launch).
. benchmarks/_dec.sh
out_dir s19e
SW="8192,4096;16384,4096;49152,4096;98304,4096;196608,4096"
for noc in 1 0; do
    fl=""; [ $noc = 1 ] && fl="--floor 17.8,35.7,106.9,213.9,427.8"
    TENSORFOLD_GEMV3_NOC=$noc timeout 100 python3 benchmarks/bench_gemv3.py --no-old --rows 1 --shapes - $fl \
        --custom "$SW" --configs "4,1,4,1,396" --out "$R/noc$noc" >"$R/sweep_noc$noc.txt" 2>&1
    echo "== noc $noc rc $?"; grep "us \|FAIL" "$R/sweep_noc$noc.txt" | grep -v Warn | grep -v "x256 " | cut -c1-150
    grep "1056x256" "$R/sweep_noc$noc.txt"; pack
done

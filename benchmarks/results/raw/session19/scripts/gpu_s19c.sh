#!/usr/bin/env bash
# Session 19, call 3: qgemv's split-K completion with warp barriers instead of block barriers (default now;
# TENSORFOLD_GEMV3_EPI=block is the old code), and larger K chunks at one row (cg 32: two chunks at 9B gate + up;
# the 8-row kernels cannot hold them in static shared memory). Then qgemv's GPU tests, 9B and 27B decode.
. benchmarks/_dec.sh
out_dir s19c
for epi in warp block; do
    cfg="4,1,4,1,396"; [ $epi = warp ] && cfg="4,1,4,1,396;4,1,4,1,396,0,0,0,32"
    TENSORFOLD_GEMV3_EPI=$epi timeout 120 python3 benchmarks/bench_gemv3.py --no-old --rows 1,8 --shapes 2,3,4,5 \
        --configs "$cfg" --out "$R/epi_$epi" >"$R/gemv3_epi_$epi.txt" 2>&1
    echo "== epi $epi rc $?"; grep "us \|FAIL" "$R/gemv3_epi_$epi.txt" | grep -v Warn | cut -c1-150; pack
done
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    tests/kernels/test_gpu_glu.py >"$R/gpu_tests.txt" 2>&1
echo "== gpu tests rc $?"; tail -2 "$R/gpu_tests.txt"; pack
dec 9b 9b; pack
dec 27b 27b; pack

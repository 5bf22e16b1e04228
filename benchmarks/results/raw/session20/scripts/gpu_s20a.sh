#!/usr/bin/env bash
# Prepared in session 19 for the next session's first device call (one GPU, about 4-5 minutes; gpu_s20b.sh is the
# end-to-end follow-up).
# Session 19 found qgemv's loads alone (TENSORFOLD_GEMV3_NOC=1) stream at 2.67 TB/s against 4.25 for a plain
# grid-stride read: the access order, not the arithmetic, is the limit. This call tells which order streams:
# (1) plain reads: grid-stride against each warp walking its own contiguous share (qgemv's grid);
# (2) qgemv on the swept layout (qgemv.sweep_pack: the pieces of one K iteration of every 16-row unit adjacent, so
#     a chunk's warps read one window that sweeps through the weight) against the MLX layout, 1 and 8 rows;
# (3) the same without the arithmetic; (4) the swept layout's GPU tests.
. benchmarks/_dec.sh
out_dir s20a
timeout 100 python3 benchmarks/bench_gemv3.py --no-old --rows 1 --shapes - --floor 56.6,213.9 --out "$R/f" \
    >"$R/floor.txt" 2>&1
echo "== floor rc $?"; grep "floor\|FAIL\|Error" "$R/floor.txt" | cut -c1-150; pack
timeout 220 python3 benchmarks/bench_gemv3.py --no-old --rows 1,8 --shapes 2,3,4,5 --swept --glu --configs "4,1,4,1,396" \
    --out "$R/sw" >"$R/swept.txt" 2>&1
echo "== swept rc $?"; grep "us \|FAIL\|Error" "$R/swept.txt" | grep -v Warn | cut -c1-150; pack
TENSORFOLD_GEMV3_NOC=1 timeout 100 python3 benchmarks/bench_gemv3.py --no-old --rows 1 --shapes 2,5 --swept \
    --configs "4,1,4,1,396" --out "$R/swnoc" >"$R/swept_noc.txt" 2>&1
echo "== swept noc rc $?"; grep "us \|FAIL\|Error" "$R/swept_noc.txt" | grep -v Warn | cut -c1-150; pack
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    -k swept >"$R/gpu_tests.txt" 2>&1
echo "== gpu tests rc $?"; tail -3 "$R/gpu_tests.txt"; pack

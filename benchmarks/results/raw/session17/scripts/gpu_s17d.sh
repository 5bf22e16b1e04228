#!/usr/bin/env bash
# Session 17, third device call (one GPU): is the SwiGLU epilogue slower in qgemv (9B / 27B one stream fell in
# call 2 while 2B gained 8.5 %)? bench_gemv3 --glu at the 2B / 9B / 27B gate | up shapes (1 and 8 rows), then 9B and
# 27B decode at 1 / 8 streams with TENSORFOLD_GLU=0 and =1 on one machine.
. benchmarks/_dec.sh
out_dir s17d
timeout 150 python3 benchmarks/bench_gemv3.py --rows 1,8 --shapes 0,2,4 --glu --out "$R/g" >"$R/g.txt" 2>&1
echo "== gemv rc $?"; grep -E " us " "$R/g.txt"; pack
for g in 9b 27b; do
    TENSORFOLD_GLU=0 dec ${g}_noglu $g; pack
    dec ${g}_glu $g; pack
done

#!/usr/bin/env bash
# Session 18, fifth device call: qgemv's cp.async ring (the "stages" form: weight words land in shared memory, no
# registers held in flight, so the assembler cannot sink them) re-measured since the session 15 x-preparation
# rewrite, plain and SwiGLU-epilogue forms, against the register ring, at the 9B / 27B gate + up and down shapes,
# one row (the form applies to one-n-tile launches only).
. benchmarks/_dec.sh
out_dir s18e
export TENSORFOLD_GLUK=0  # this branch's glu=2 kernel off: the glu form of main
timeout 400 python3 benchmarks/bench_gemv3.py --no-old --rows 1,4 --shapes 2,3,4,5 --glu \
    --configs "4,1,4,1,396;4,1,4,1,396,2;4,1,4,1,396,3;4,1,4,1,396,4;4,1,2,1,396,4;4,1,2,1,396,6" \
    --out "$R" >"$R/gemv3_stages.txt" 2>&1
echo "== bench rc $?"; grep -v Warning "$R/gemv3_stages.txt" | grep -v "warn(" | grep "R=1" | tail -n 48; pack

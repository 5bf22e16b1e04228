#!/usr/bin/env bash
# Session 45, call 4: the timelines of call 3 (which failed: the new completion's lane variable was named tl, the
# timeline's stamp argument): the 2B head and the 27B down at 1 / 8 rows, under the default completion set (auto:
# 16x4 past 64 outputs) and under auto31 (4x8), both with the division-free indexing of 8500bfb.
. benchmarks/_dec.sh
out_dir s45e
t0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
for cu in auto auto31; do
    TENSORFOLD_GEMV3_CMPU=$cu timeout 200 python3 benchmarks/qgemv_timeline.py --shapes 248320x2048,5120x17408 \
        --rows 1,8 --out "$R" > "$R/tl_$cu.txt" 2>&1
    echo "== timeline $cu rc $? at $((SECONDS - t0)) s"; grep -h "us per launch" "$R/tl_$cu.txt"; pack
done

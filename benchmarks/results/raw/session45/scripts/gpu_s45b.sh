#!/usr/bin/env bash
# Session 45: where the eight-row qgemv launches spend their time (issue 3: the 27B down costs 1.51-1.54x one row,
# the heads 1.73x): the %globaltimer timeline (benchmarks/qgemv_timeline.py --rows 1,8) of the 27B down, the 2B
# head and the 9B gate+up SwiGLU, one row and eight, without and with PDL. Prediction: the loop phase (not the x
# preparation or the completion) carries most of the eight-row excess at the head (19.6 items a warp).
. benchmarks/_dec.sh
out_dir s45b
t0=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpu.txt"
timeout 500 python3 benchmarks/qgemv_timeline.py --shapes ${TL_SHAPES:-5120x17408,248320x2048,24576x4096g} --rows 1,8 \
    --out "$R" > "$R/tl.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us per launch\|\"loop\"\|completion\|x prep\"\|Error" "$R/tl.txt" | head -60
pack

#!/usr/bin/env bash
# Session 28, call 1 (one GPU, about 9 minutes): qgemv's x preparation and first loads, A/B under PDL.
# Session 27's timeline: blocks of a launch are resident about 4 us before the PDL wait returns; the x preparation
# then takes 2.3 us (x's loads queued behind the weight loads issued before the wait). Opt-in forms (same bits,
# simulator-tested): PRE=0 weights after x; PRE=2/3/4 the first 1/2/3 tiles' runs prefetched into L2 before the
# wait, then x first; XQ=1 the group sums by quad shuffles (one barrier less).
# Predictions, 9B gate+up SwiGLU one row (23.2 us without PDL in session 27): PRE=2 -1 to -2 us under PDL, PRE=3
# a further -0.5 to -1 (about 14 MB more in flight during the previous tail), PRE=4 no better than 3 (past the idle
# window); XQ=1 -0.3 to -0.6 us.
# 1. bench_gemv3 --pdl at 9B gate+up / down, 27B gate+up / down, rows 1 and 8, per combination; 2. the best
# combination (least one-row sum) against the default in 9B decode; 3. the timeline of the best, if time is left.
. benchmarks/_dec.sh
out_dir s28a
t0=$SECONDS
for eq in "1 0" "2 0" "3 0" "4 0" "3 1"; do set -- $eq
TENSORFOLD_GEMV3_PRE=$1 TENSORFOLD_GEMV3_XQ=$2 timeout 100 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 \
    --rows 1,8 --swept --glu --only-sw --no-old --pdl --out "$R/g3_e$1q$2" >"$R/gemv3_e$1q$2.txt" 2>&1
echo "== gemv3 e$1 q$2 rc $? at $((SECONDS - t0)) s"; grep -h " us " "$R/gemv3_e$1q$2.txt" | head -16
done; pack
best=$(python3 - "$R" <<'PY'
import glob, re, sys
best = None
for f in sorted(glob.glob(sys.argv[1] + "/gemv3_e*q*.txt")):
    us = [float(m.group(1)) for ln in open(f) for m in [re.search(r" R=1 .* ([0-9.]+) us ", ln)] if m]
    if len(us) == 8 and (best is None or sum(us) < best[0]):
        best = (sum(us), f.rsplit("gemv3_e", 1)[1][:-4])
print(best[1] if best else "1q0")
PY
)
echo "== best $best"
e=${best%q*}; q=${best#*q}
dec 9b_e1q0 9b --prompts ""
if [ "$best" != "1q0" ]; then TENSORFOLD_GEMV3_PRE=$e TENSORFOLD_GEMV3_XQ=$q dec 9b_e${e}q$q 9b --prompts ""; fi
pack
if [ $((SECONDS - t0)) -lt 480 ]; then
for eq in "1 0" "$e $q"; do set -- $eq
TENSORFOLD_GEMV3_PRE=$1 TENSORFOLD_GEMV3_XQ=$2 timeout 60 python3 benchmarks/qgemv_timeline.py \
    --shapes 24576x4096g,5120x17408 --out "$R" >"$R/timeline_e$1q$2.txt" 2>&1
echo "== timeline e$1 q$2 rc $? at $((SECONDS - t0)) s"; grep -h "us per launch" "$R/timeline_e$1q$2.txt" | head -4
done; pack
fi
echo "== done at $((SECONDS - t0)) s"

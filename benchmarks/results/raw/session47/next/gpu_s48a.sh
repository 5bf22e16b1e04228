#!/usr/bin/env bash
# Prepared in session 47 for session 48 (first call, a fresh machine, LIMIT=540; an H200 if one comes: issue 3's
# table and issue 4's figures have not run on an H200 since session 44).
# (1) issue 3's kernel table twice: as before (graphs without PDL) and with --pdl (new in session 47, never run:
#     the graphs built with PDL for aware kernels, as the runtime's decode graphs are; rows say graph+pdl).
#     Predicted: the 9B / 27B plain one-row launches 1-2 µs faster with --pdl (session 47's head timeline: 108.2 ->
#     106.3 µs; session 30: 9B down 15.5 -> 13.8 µs).
# (2) qgemv timelines at one row of the plain 9B / 27B launches with the default CPRED=auto (session 47 made the
#     completion's loads past the last chunk predicated at 1-4 rows: 0.4-1.1 µs a launch): where the rest goes.
# (3) decode at 1 / 8 streams for 9B, 2B, 27B (issue 4's one-stream targets: 400 / 800 / 150 tok/s on the H200).
. benchmarks/_dec.sh
out_dir s48a
t0=$SECONDS
LIMIT=${LIMIT:-540}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 2b 9b 27b > /dev/null 2>&1 &
for f in "" --pdl; do
    n=kern${f:+_pdl}
    mkdir -p "$R/$n"
    timeout 150 python3 benchmarks/bench_kernels.py --only decode --no-b $f --out "$R/$n" > "$R/$n.txt" 2>&1
    echo "== $n rc $? at $((SECONDS - t0)) s"; grep -h "decode |" "$R/$n.txt" | grep qgemv | grep "R=1" | cut -c1-110; pack
done
mkdir -p "$R/tl"
timeout 120 python3 benchmarks/qgemv_timeline.py --shapes 4096x12288,12352x4096,5120x17408,5120x6144 --rows 1 \
    --out "$R/tl" > "$R/tl.txt" 2>&1
echo "== timeline rc $? at $((SECONDS - t0)) s"; grep -h "us per launch" "$R/tl.txt" | head -8; pack
wait
for g in 9b 2b 27b; do
    left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 50 ] && break
    steps=$([ "$g" = 27b ] && echo 100 || echo 200)
    timeout "$left" python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps "$steps" --out "$R/dec_$g.md" > "$R/dec_$g.txt" 2>&1
    echo "== dec $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/dec_$g.txt" | head -4; pack
done
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Prepared in session 43 for session 44: TENSORFOLD_TC_XFRAG=1 (the first kernel's whole-share form makes x's mma
# fragments once a block and decodes a pair in one LOP3; same bits). Its GPU test first, then the phase timeline of
# the whole form with and without it, then the decode A/B at 2B and 9B (one process each, two rounds), then 27B at
# the defaults (no whole-form launch there). Predicted (SASS of the block after x is staged: 9B 910 -> 585
# instructions a warp, 2B 152-1160 from 282-1920): the 9B 4096 x 4096 launch's arithmetic 3.6 -> 2.3-2.8 us; decode
# at one stream 9B +0.7 to +1.4 %, 2B +1.5 to +3.4 %; eight streams unchanged (one row only).
. benchmarks/_dec.sh
out_dir s44a
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
( for g in 2b 9b 27b; do
    python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_decode import write_synth_any; \
write_synth_any('$g', '/tmp/tfm_w/synth-$g-4bit-g64', bits=4, group_size=64)" > "$R/synth_$g.txt" 2>&1 &
  done; wait ) &
ptest xfrag 200 tests/kernels/test_gpu_gemv.py -k "xfrag or lop3 or whole" -s &
TENSORFOLD_CACHE_DIR=/tmp/tfkc_tl timeout 200 python3 benchmarks/tc_timeline.py \
    --shapes 4096x4096,2048x2048,8224x2048,2048x6144 --whole --xf --out "$R" > "$R/tc_timeline.txt" 2>&1 &
wait
echo "== tests + timeline at $((SECONDS - t0)) s"; grep -h "same bits" "$R/tc_timeline.txt"; pack
mkdir -p /tmp/tfm && mv /tmp/tfm_w/* /tmp/tfm/ 2>/dev/null
for g in 2b 9b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --ab-env "TENSORFOLD_TC_XFRAG=0;TENSORFOLD_TC_XFRAG=1" --ab-rounds 2 --out "$R/ab_$g.md" \
        > "$R/ab_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_$g.txt" | head -10; pack
done
timeout 120 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 100 --out "$R/dec_27b.md" > "$R/dec_27b.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/dec_27b.txt" | head -4; pack
echo "== done at $((SECONDS - t0)) s"

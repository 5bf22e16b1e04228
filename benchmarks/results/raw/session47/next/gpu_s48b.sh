#!/usr/bin/env bash
# Prepared in session 47 for session 48: a warm follow-up of gpu_s48a.sh (its synth checkpoints in /tmp/tfm; if the
# machine is fresh, the synth step below writes them). The opt-in SwiGLU completion set TENSORFOLD_GEMV3_CMPU=autog18
# (1 x 8 partials for warps of up to 32 outputs instead of 1 x 16: at one row the 9B / 27B gate | up, ks 4 / 5,
# loaded 32 partials an output for 8 / 10, clamped; predicating them as the plain 1-4-row kernels now do took the
# SwiGLU kernel to 255 registers with spills, 1 x 8 stays at 147).
# (1) GPU bits: test_swiglu_completion_sets (auto / autog18 / CMP=1 same bits at 9B and 27B gate | up, 1 / 3 / 8
#     rows; float64 oracle) and the completion-form test.
# (2) decode A/B CMPU auto vs autog18 at 9B and 27B (one process a geometry, two rounds). Predicted: one stream
#     +0.3 to +0.6 % (by analogy with session 47: 0.4-1.1 µs a plain launch for 10-12 fewer loads a lane; here 16
#     fewer, 32 / 64 gate | up launches a 9B / 27B step); eight streams a tie (their warps take 4 x 8).
. benchmarks/_dec.sh
out_dir s48b
t0=$SECONDS
LIMIT=${LIMIT:-480}
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
[ -d /tmp/tfm/synth-27b-4bit-g64 ] || synth_all /tmp/tfm 9b 27b > /dev/null 2>&1 &
ptest swg 240 tests/kernels/test_gpu_qgemv.py -k "swiglu_completion_sets or completion_forms" -s
wait
pack
for g in 9b 27b; do
    left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 60 ] && break
    steps=$([ "$g" = 9b ] && echo 200 || echo 100)
    timeout "$left" python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps "$steps" --ab-env "TENSORFOLD_GEMV3_CMPU=auto;TENSORFOLD_GEMV3_CMPU=autog18" --ab-rounds 2 \
        --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_$g.txt" | head -10; pack
done
echo "== done at $((SECONDS - t0)) s"

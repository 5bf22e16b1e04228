#!/usr/bin/env bash
# Prepared in session 46 for session 47 (first call, a fresh machine: run with LIMIT=540). The batched completion's
# partial loads past the last chunk predicated off in plain kernels (TENSORFOLD_GEMV3_CPRED=1, opt-in, never run on
# a GPU) against clamped and loaded again (0, the default).
# (1) GPU bits: the completion-form test with the predicated set ("auto-cp"); real-shape rows / bf16 x / deferred.
# (2) qgemv timelines 1 vs 0 at the 2B head (ks 2: a 4 x 8 pass loaded 8 partials an output for 2), 1 and 8 rows.
# (3) the 2B decode A/B 0 vs 1 (200 steps, two rounds), if time is left. Predicted (H100): head 8 rows 139 ->
# 125-130 µs, 1 row 108 -> 104-106; 2B decode +0.2 % at one stream, +0.5-1 % at eight.
. benchmarks/_dec.sh
out_dir s47a
t0=$SECONDS
LIMIT=${LIMIT:-420}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
# TESTS=short (the budget's last call): the completion-form test at the 2B head only
if [ "${TESTS:-full}" = short ]; then
    ptest cmpf "$((LIMIT / 2))" tests/kernels/test_gpu_qgemv.py -k "completion_forms and head" -s
else
    synth_all /tmp/tfm 2b 9b 27b &
    ptest cmpf 250 tests/kernels/test_gpu_qgemv.py -k "completion_forms" -s &
    ptest qrows 250 tests/kernels/test_gpu_qgemv.py -k "real_shapes_rows or bf16_x or deferred" -s &
    wait
fi
pack
echo "== tests done at $((SECONDS - t0)) s"
for c in 1 0; do
    left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 30 ] && break
    mkdir -p "$R/tl$c"
    TENSORFOLD_GEMV3_CPRED=$c timeout "$left" python3 benchmarks/qgemv_timeline.py --shapes 248320x2048 \
        --rows 1,8 --out "$R/tl$c" > "$R/tl$c.txt" 2>&1
    echo "== timeline CPRED=$c rc $? at $((SECONDS - t0)) s"; grep -h "us per launch" "$R/tl$c.txt" | head -8; pack
done
left=$((LIMIT - (SECONDS - t0)))
if [ "$left" -ge 40 ] && [ -d /tmp/tfm/synth-2b-4bit-g64 ]; then
    timeout "$left" python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 200 --ab-env "TENSORFOLD_GEMV3_CPRED=0;TENSORFOLD_GEMV3_CPRED=1" --ab-rounds 2 \
        --out "$R/ab_2b.md" > "$R/ab_2b.txt" 2>&1
    echo "== ab 2b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_2b.txt" | head -8; pack
fi
echo "== done at $((SECONDS - t0)) s"

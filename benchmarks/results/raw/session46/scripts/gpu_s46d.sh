#!/usr/bin/env bash
# Session 46, the one call left (two refusals each of H200 and H100 spent the rest): gpu_s46b.sh reordered to fit
# 570 s. The batched completion's partial loads past the last chunk predicated off in plain kernels
# (TENSORFOLD_GEMV3_CPRED=1, the new default) against clamped and loaded again (0, the old form).
# (1) GPU bits: the completion-form test with the clamped set added; real-shape rows / bf16 x / deferred.
# (2) the 2B decode A/B 0 vs 1 (200 steps, two rounds). (3) qgemv timelines 1 vs 0, 2B head and 27B down, 1 and 8
# rows. Predicted (H100): head 8 rows 139 -> 125-130 µs, 1 row 108 -> 104-106; 27B down small; 2B decode +0.2 % at
# one stream, +0.5-1 % at eight.
. benchmarks/_dec.sh
out_dir s46d
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
synth_all /tmp/tfm 2b &
ptest cmpf 280 tests/kernels/test_gpu_qgemv.py -k "completion_forms" -s &
ptest qrows 280 tests/kernels/test_gpu_qgemv.py -k "real_shapes_rows or bf16_x or deferred" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
timeout 110 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 200 --ab-env "TENSORFOLD_GEMV3_CPRED=0;TENSORFOLD_GEMV3_CPRED=1" --ab-rounds 2 \
    --out "$R/ab_2b.md" > "$R/ab_2b.txt" 2>&1
echo "== ab 2b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_2b.txt" | head -8; pack
for c in 1 0; do
    left=$((555 - (SECONDS - t0)))
    [ "$left" -lt 30 ] && break
    mkdir -p "$R/tl$c"
    TENSORFOLD_GEMV3_CPRED=$c timeout "$left" python3 benchmarks/qgemv_timeline.py --shapes 248320x2048,5120x17408 \
        --rows 1,8 --out "$R/tl$c" > "$R/tl$c.txt" 2>&1
    echo "== timeline CPRED=$c rc $? at $((SECONDS - t0)) s"; grep -h "us per launch" "$R/tl$c.txt" | head -8; pack
done
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Session 48, call 4 (warm, right after call 3): the GPU tier on the final code, three pytest processes side by
# side (own kernel caches): qgemv at real shapes (the SwiGLU completion sets incl. the new default, completion
# forms, rows 1-16, bf16 x), decode graphs == eager at 9B / 27B (4 layers; their gate | up takes the new default
# at ks 4 / the old at ks 5), and the 2B runtime tier (window / tree / commit, alone vs batched, prompt vs step,
# reference, fp8 vs bf16, graphs). Then a full-matrix geometry call 3 could not reach ($GEOMS).
. benchmarks/_dec.sh
out_dir s48d
t0=$SECONDS
LIMIT=${LIMIT:-420}
nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
ptest qg 300 tests/kernels/test_gpu_qgemv.py -k "swiglu_completion_sets or completion_forms or rows_1_to_16 or bf16_x or swept_layout" -s &
ptest large 300 tests/runtime/test_gpu_graphs_large.py -s &
ptest rt 330 tests/runtime/test_gpu_runtime.py tests/runtime/test_gpu_graphs.py -s &
wait
echo "== tests at $((SECONDS - t0)) s"; pack
for g in ${GEOMS:-}; do
    left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 90 ] && break
    timeout "$left" python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8,32 \
        --prompts 512,4096,16384 --steps 100 --out "$R/full_$g.md" > "$R/full_$g.txt" 2>&1
    echo "== full $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|prompt \|rror" "$R/full_$g.txt" | head -12; pack
done
echo "== done at $((SECONDS - t0)) s"

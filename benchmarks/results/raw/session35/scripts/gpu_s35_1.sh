#!/usr/bin/env bash
# Session 35 call 1: session 34's gpu_s35c.sh and gpu_s35a.sh in one call. First 2B synth decode at 1 / 8 streams
# alone (the loader refactor 4e9c4e0 and the review commits on the GPU; prediction within noise of 749.2 / 4,732.5
# tok/s), then three GPU-tier pytest processes side by side (nothing in them is timed): the PDL test, the runtime
# tier's swept / deferred items, and the whole qgemv + SwiGLU tier. Prediction: all pass.
. benchmarks/_dec.sh
out_dir s35_1
t0=$SECONDS
timeout 150 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1,8 --prompts "" --steps 30 \
    --out "$R/decode_2b.md" > "$R/decode_2b.txt" 2>&1
echo "== 2b decode rc $? at $((SECONDS - t0)) s"; grep -h "decode \|loaded" "$R/decode_2b.txt" | head -4; pack
left=$((575 - (SECONDS - t0)))
ptest pdl $((left < 200 ? left : 200)) tests/runtime/test_gpu_pdl.py &
ptest runtime_rest $left tests/runtime/test_gpu_runtime.py -k "swept or deferred" &
ptest gpu_qgemv $left tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_glu.py &
wait
pack
echo "== done at $((SECONDS - t0)) s"

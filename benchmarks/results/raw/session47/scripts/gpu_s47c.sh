#!/usr/bin/env bash
# Session 47, the final call (a fresh machine, LIMIT about 500): the final code, where TENSORFOLD_GEMV3_CPRED=auto
# (the default now) predicates the completion's loads past the last chunk in the 1-4-row plain kernels only.
# (1) GPU tests of the changed kernels: the completion forms (auto / auto164 / auto88 / all predicated, same bits)
#     and the real-shape rows / bf16 x / deferred qgemv tests, on the default kernels.
# (2) decode A/B 0 vs auto at 9B and 27B (one process a geometry, two rounds). Predicted: auto = the CPRED=1
#     figures at one stream (27B +1.8 %, 9B +0.9 % over 0) and the CPRED=0 figures at eight (a tie with 0).
# (3) issue 3's kernel table (bench_kernels --only decode --no-b) if time is left (first on an H200).
. benchmarks/_dec.sh
out_dir s47c
t0=$SECONDS
LIMIT=${LIMIT:-480}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
kern() {
    local left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 80 ] && return
    timeout "$left" python3 benchmarks/bench_kernels.py --only decode --no-b --out "$R" > "$R/kern.txt" 2>&1
    echo "== kernels rc $? at $((SECONDS - t0)) s"; grep -h "decode |" "$R/kern.txt" | cut -c1-110 | head -48; pack
}
synth_all /tmp/tfm 9b 27b &
ptest cmpf 250 tests/kernels/test_gpu_qgemv.py -k "completion_forms" -s &
ptest qrows 250 tests/kernels/test_gpu_qgemv.py -k "real_shapes_rows or bf16_x or deferred" -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"
grep -q H200 "$R/gpu.txt" && kern
for g in 9b 27b; do
    left=$((LIMIT - (SECONDS - t0)))
    [ "$left" -lt 60 ] && break
    steps=$([ "$g" = 9b ] && echo 200 || echo 100)
    timeout "$left" python3 benchmarks/bench_decode.py --geometry "$g" --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps "$steps" --ab-env "TENSORFOLD_GEMV3_CPRED=0;TENSORFOLD_GEMV3_CPRED=auto" --ab-rounds 2 \
        --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/ab_$g.txt" | head -10; pack
done
grep -q H200 "$R/gpu.txt" || kern
echo "== done at $((SECONDS - t0)) s"

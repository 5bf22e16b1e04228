#!/usr/bin/env bash
# Session 43, one call (device budget about 500 s): the GPU tests of the norm tail (kernels at the 9B / 2B shapes,
# the runner's logits with and without), the logprobs parity test with its derived bound; then the decode A/B of
# TENSORFOLD_NORM_TAIL=0 / 1 at 2B and 9B (one process each, two rounds) and 27B at the defaults (no launch there
# takes a tail) while time is left. On an H200 the one-stream figures are issues 3 / 4's.
. benchmarks/_dec.sh
out_dir s43b
t0=$SECONDS
LIMIT=${LIMIT_S:-340}
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
( for g in 2b 9b 27b; do
    python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_decode import write_synth_any; \
write_synth_any('$g', '/tmp/tfm_w/synth-$g-4bit-g64', bits=4, group_size=64)" > "$R/synth_$g.txt" 2>&1 &
  done; wait ) &
SYN=$!
ptest tailk 150 tests/kernels/test_gpu_norm_tail.py -s &
ptest tailr 150 tests/runtime/test_gpu_runtime.py -k norm_tail -s &
ptest parity 150 tests/engine/test_backend_parity_gpu.py -s &
wait
pack
wait $SYN
mkdir -p /tmp/tfm && mv /tmp/tfm_w/* /tmp/tfm/
echo "== tests + synth done at $((SECONDS - t0)) s"
for g in 2b 9b; do
    timeout 120 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --ab-env "TENSORFOLD_NORM_TAIL=0;TENSORFOLD_NORM_TAIL=1" --ab-rounds 2 --out "$R/ab_$g.md" \
        > "$R/ab_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:\|copy" "$R/ab_$g.txt" | head -10; pack
done
if [ $((SECONDS - t0)) -lt $((LIMIT - 80)) ]; then
    timeout $((LIMIT - (SECONDS - t0))) python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm \
        --streams 1,8 --prompts "" --steps 100 --out "$R/dec_27b.md" > "$R/dec_27b.txt" 2>&1
    echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:" "$R/dec_27b.txt" | head -4; pack
fi
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Session 43, one call (the session's device budget was 599 s): the logprobs parity test with its derived bound,
# then 2B / 9B / 27B decode at the defaults (one process a geometry; on an H200 the one-stream figures are issues
# 3 / 4's), then, with what time is left, the decode GEMVs alone (bench_kernels --only decode: issue 3's % of copy).
. benchmarks/_dec.sh
out_dir s43a
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
# the synth checkpoints written while the test runs (CPU work); bench_decode finds them complete afterwards
( for g in 2b 9b 27b; do
    python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from bench_decode import write_synth_any; \
write_synth_any('$g', '/tmp/tfm_w/synth-$g-4bit-g64', bits=4, group_size=64)" > "$R/synth_$g.txt" 2>&1 &
  done; wait ) &
SYN=$!
ptest parity 150 tests/engine/test_backend_parity_gpu.py -s
pack
wait $SYN
mkdir -p /tmp/tfm && mv /tmp/tfm_w/* /tmp/tfm/
echo "== tests + synth done at $((SECONDS - t0)) s"
for g in 2b 9b 27b; do
    timeout 110 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --out "$R/dec_$g.md" > "$R/dec_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:\|loaded\|copy" "$R/dec_$g.txt" | head -5; pack
done
left=$(( ${BUDGET_S:-400} - (SECONDS - t0) ))
if [ $left -gt 60 ]; then
    timeout $left python3 benchmarks/bench_kernels.py --only decode --no-b --out "$R" > "$R/kern.txt" 2>&1
    echo "== kernels rc $? at $((SECONDS - t0)) s"; tail -5 "$R/kern.txt"; pack
fi
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Prepared in session 35 (its device time was spent): the greedy step graphs on the GPU. Every row greedy -> the
# step / window / tree graph ends in the one-launch argmax instead of the sampler's eight launches (same ids; the
# simulator tests check it). Session 35's 2B profile: the seven skipped launches took 13.4 us alone (hist 2.1,
# gather 2.0, dsum 1.9, sample 1.9, plan 1.8, select 1.7, draw 1.7; each replayed alone in a graph).
# (1) decode A/B in one process per geometry, TENSORFOLD_GREEDY_GRAPHS=1 against 0, 2 rounds (bench_decode's
# rows are greedy). Prediction: 2B +0.7 to +1.0 % at one stream (about -10 us of 1,340), 9B +0.3 %, 27B +0.1 %.
# (2) the graph tests, which now cover both forms: test_gpu_graphs.py (2B) and test_gpu_graphs_large.py (9B, 27B).
# Prediction: pass.
. benchmarks/_dec.sh
out_dir s36a
t0=$SECONDS
AB="TENSORFOLD_GREEDY_GRAPHS=1;TENSORFOLD_GREEDY_GRAPHS=0"
for g in 2b 9b; do
    timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 60 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_$g.md" > "$R/decode_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \[" "$R/decode_$g.txt" | head -8; pack
done
ptest graphs 300 tests/runtime/test_gpu_graphs.py tests/runtime/test_gpu_graphs_large.py -s &
wait
pack
echo "== done at $((SECONDS - t0)) s"

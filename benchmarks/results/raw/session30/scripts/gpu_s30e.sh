#!/usr/bin/env bash
# Session 30, last ~240 s of device time: the cubin re-save fix (1ce4416) on the H200. Calls 2 and 3 found every
# entry without a cubin at each warm start (the re-save had failed). Prediction: the cold load saves the linked
# cubins; both warm loads report "0 without a cubin", and the graphs phase drops by about the 0.6 s link.
. benchmarks/_dec.sh
out_dir s30e
t0=$SECONDS
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('9b', '/tmp/tfm', print)" \
    > "$R/synth.txt" 2>&1
echo "== synth at $((SECONDS - t0)) s"
L="python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --load-only"
TENSORFOLD_COMPILE_LOG=1 TENSORFOLD_CACHE_DIR=/tmp/ck_e timeout 75 $L > "$R/load_cold.txt" 2>&1
echo "== cold rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|kernels:\|rror\|failed" "$R/load_cold.txt" | head -8
pack
for i in 1 2; do
    TENSORFOLD_CACHE_DIR=/tmp/ck_e timeout 25 $L > "$R/load_warm$i.txt" 2>&1
    echo "== warm$i rc $? at $((SECONDS - t0)) s"; grep -h "load:\|ahead\|kernels:\|rror" "$R/load_warm$i.txt"
    pack
done
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Session 33 call 4: the fix (no .nc loads of activations: x in the GEMVs and the prompt GEMM, logits in the
# sampler, q / cache rows / partials in attention). Prediction: every verify graph equals eager (tree, chain,
# sampled, both slots; test_verify_graph_pdl_kernels' default row EQUAL), the rest of the GPU runtime tier passes,
# and decode tok/s stays within noise of the last measurements (2B 721.4 at one stream, session 27; 9B 368.1 /
# 2,089.8 at 1 / 8, session 30): x, logits and the attention rows are a small share of the bytes, read once.
. benchmarks/_dec.sh
out_dir s33e
t0=$SECONDS
python3 -c "from tests.runtime.test_gpu_runtime import _synth; _synth('2b')" > "$R/synth.txt" 2>&1
(python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('9b', '/tmp/tfm', print); b._synth_dir('2b', '/tmp/tfm', print)" > "$R/synth_bench.txt" 2>&1) &
ptest graphs 300 tests/runtime/test_gpu_graphs.py -s &
ptest pdl 300 tests/runtime/test_gpu_pdl.py &
ptest runtime 300 tests/runtime/test_gpu_runtime.py &
wait
echo "== tests done at $((SECONDS - t0)) s"; pack
grep -h " vs \|default (\|alone" "$R/graphs.txt" | head -40
dec 2b 2b
pack
left=$((560 - (SECONDS - t0)))
[ $left -gt 90 ] && dec 9b 9b --prompts ""
pack
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Prepared in session 38 (no device was lent that session: nothing here has run). The GPU tier of session 37's
# and 38's code, side by side (compile-bound, nothing timed):
# - ahead: run-ahead at 2B with graphs, and the engine over the GPU backend (it runs ahead by default since s37);
#   then run-ahead again with the ids chain inside the step graphs (s38, TENSORFOLD_CHAIN_GRAPH=1);
# - attn: the split-K attention kernels at 2B / 9B / 27B head counts, with s38's fused merge
#   (test_fused_merge_same_bits: one launch == two launches bit for bit, 20 launches in a row, 130 rows), then the
#   runtime's graph tests with TENSORFOLD_ATTN_FUSED=1 (graphs == eager with the fused launch in every layer);
# - fuse: the add + RMSNorm fusion's kernel tier on the corrected launch path (its 27B gate | up case failed in
#   s37 on the old path), the fused GDN kernels, and qgemv's tier (affine.launch_qgemv now hands qgemv plans
#   over before reading W's shape, s38).
# Five pytest processes side by side (16 cores; compiles are CPU-bound). Predictions: every test passes.
. benchmarks/_dec.sh
out_dir s39a
t0=$SECONDS
ptest ahead 480 tests/runtime/test_gpu_ahead.py tests/engine/test_backend_parity_gpu.py -s &
TENSORFOLD_CHAIN_GRAPH=1 ptest ahead_chain 420 tests/runtime/test_gpu_ahead.py -s &
ptest attn 420 tests/kernels/test_gpu_attention.py -s &
TENSORFOLD_ATTN_FUSED=1 ptest graphs_fused 480 tests/runtime/test_gpu_graphs.py -s &
ptest fuse 480 tests/kernels/test_gpu_norm_fuse.py tests/kernels/test_gpu_fused.py tests/kernels/test_gpu_qgemv.py -s &
wait
pack
echo "== tests done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Prepared in session 32 for the next session's first call: find why the sampled tree-verify graph differs from
# the eager tree (session 32 call 1: test_tree_graph_replay_equals_eager failed at rep 0, window graphs equal).
# Four processes side by side (compiles are CPU-bound), each with its own kernel cache:
#   default        - the whole graphs file (tree test + test_verify_graph_factors, which lists every factor)
#   pdl0           - TENSORFOLD_PDL=0: no programmatic dependent launch inside the graphs
#   defer0         - TENSORFOLD_GEMV_DEFER=0: split-K completion inside the GEMVs (no deferred partial sums)
#   attnp0         - TENSORFOLD_ATTN_PROMPT=0: prompt attention on CUDA cores (tensor-core form is newer than the
#                    last pass of this test, session 22)
# Prediction: exactly one switch makes the tree test pass; the factors test names the side that is wrong.
# Then the qgemv + SwiGLU GPU tier with a long limit.
. benchmarks/_dec.sh
out_dir s33a
t0=$SECONDS
K="tests/runtime/test_gpu_graphs.py"
ptest graphs_default 420 $K &
(export TENSORFOLD_PDL=0; ptest graphs_pdl0 420 $K -k "tree or factors") &
(export TENSORFOLD_GEMV_DEFER=0; ptest graphs_defer0 420 $K -k "tree or factors") &
(export TENSORFOLD_ATTN_PROMPT=0; ptest graphs_attnp0 420 $K -k "tree or factors") &
wait
echo "== graphs done at $((SECONDS - t0)) s"; pack
for f in "$R"/graphs_*.txt; do echo "-- $f"; grep -h "^E  \|passed\|failed" "$f" | head -8; done
left=$((570 - (SECONDS - t0)))
[ $left -gt 60 ] && ptest gpu_qgemv $left tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_glu.py
pack
echo "== done at $((SECONDS - t0)) s"

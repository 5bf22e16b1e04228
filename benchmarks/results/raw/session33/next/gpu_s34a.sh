#!/usr/bin/env bash
# Prepared in session 33 for the next session's first call: what the coherent-load fix (c7330e2) has not yet been
# run against. (1) tests/runtime/test_gpu_graphs_large.py: step / window / tree graphs == eager at 9B and 27B
# geometry (4-layer cuts), where every decode linear is a qgemv3 launch; (2) the two runtime items that did not run
# in session 33 (swept, deferred); (3) the qgemv + SwiGLU GPU tier. Each process has its own kernel cache; the
# synth checkpoints are written first, one at a time.
# Prediction: all pass.
. benchmarks/_dec.sh
out_dir s34a
t0=$SECONDS
python3 -c "
from tests.runtime.test_gpu_runtime import _synth
_synth('2b'); _synth('9b', layers=4); _synth('27b', layers=4)" > "$R/synth.txt" 2>&1
echo "== synth at $((SECONDS - t0)) s"
ptest large 420 tests/runtime/test_gpu_graphs_large.py tests/runtime/test_gpu_graphs.py -s &
ptest runtime_rest 420 tests/runtime/test_gpu_runtime.py -k "swept or deferred" &
ptest gpu_qgemv 480 tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_glu.py &
wait
pack
grep -h "geometry\|4 layers\|passed\|failed" "$R"/large.txt "$R"/runtime_rest.txt "$R"/gpu_qgemv.txt | head -20
echo "== done at $((SECONDS - t0)) s"

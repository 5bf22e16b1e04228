#!/usr/bin/env bash
# Prepared in session 34 for the next session's first call: the two GPU-tier groups that sessions 33 and 34 could
# not finish (both were compile-bound beside other pytest processes): the runtime tier's swept / deferred items
# and the whole qgemv + SwiGLU kernel tier (27 items; 14 passed in session 34 call 3 before the limit). Kernels
# now compile 2-3x faster (_fastlive, 34f076b). Each process has its own kernel cache; the 2B synth checkpoint
# is written first. Prediction: all pass, both groups within 500 s.
. benchmarks/_dec.sh
out_dir s35a
t0=$SECONDS
python3 -c "
from tests.runtime.test_gpu_runtime import _synth
_synth('2b')" > "$R/synth.txt" 2>&1
echo "== synth at $((SECONDS - t0)) s"
ptest runtime_rest 540 tests/runtime/test_gpu_runtime.py -k "swept or deferred" &
ptest gpu_qgemv 560 tests/kernels/test_gpu_qgemv.py tests/kernels/test_gpu_glu.py &
wait
pack
echo "== done at $((SECONDS - t0)) s"

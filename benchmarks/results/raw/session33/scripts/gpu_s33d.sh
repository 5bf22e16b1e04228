#!/usr/bin/env bash
# Session 33 call 3: which kernel's PDL launch makes the verify graph race (call 2: PDL=0 and SWEPT=0 make the
# verify graphs equal eager; two replays differ from each other). test_verify_graph_pdl_kernels: every PDL-aware
# kernel of the tree forward launched plainly alone, and given the attribute alone, three replays each.
. benchmarks/_dec.sh
out_dir s33d
t0=$SECONDS
python3 -c "from tests.runtime.test_gpu_runtime import _synth; _synth('2b')" > "$R/synth.txt" 2>&1
ptest pdlk 380 tests/runtime/test_gpu_graphs.py -s -k "pdl_kernels"
pack
grep -h "alone\|default\|plain:\|passed\|failed" "$R/pdlk.txt" | head -60
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Session 33 call 2: bisect the verify-graph defect (call 1: tree and chain verify graphs differ from eager by
# ~5.7 logits under the default, TENSORFOLD_GEMV_DEFER=0 and TENSORFOLD_ATTN_PROMPT=0; the PDL=0 run lost a race
# on the synth checkpoint, now written aside and renamed). test_verify_graph_bisect under four settings side by
# side: default, TENSORFOLD_PDL=0, TENSORFOLD_SWEPT=0 (the swept weight layout exists only on the GPU) and
# TENSORFOLD_GLU=0. Prediction: PDL=0 makes every form equal (the verify path's gdn_recurrent is the only kernel
# that differs from the passing step-window graphs).
. benchmarks/_dec.sh
out_dir s33c
t0=$SECONDS
python3 -c "from tests.runtime.test_gpu_runtime import _synth; _synth('2b')" > "$R/synth.txt" 2>&1
K="tests/runtime/test_gpu_graphs.py"
ptest bis_default 330 $K -s -k "bisect or factors" &
(export TENSORFOLD_PDL=0; ptest bis_pdl0 330 $K -s -k "bisect or factors") &
(export TENSORFOLD_SWEPT=0; ptest bis_swept0 330 $K -s -k "bisect") &
(export TENSORFOLD_GLU=0; ptest bis_glu0 330 $K -s -k "bisect") &
wait
pack
for f in "$R"/bis_*.txt; do echo "-- $f"; grep -h " vs \|passed\|failed" "$f" | head -40; done
echo "== done at $((SECONDS - t0)) s"

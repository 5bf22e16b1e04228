#!/usr/bin/env bash
# Session 39, last call (288 s of device budget left after refused starts): only the GPU test of the new default,
# run-ahead with the ids chain inside the step graphs (tests/runtime/test_gpu_ahead.py: run-ahead ids == synchronous
# ids through finishing / joining / left-out streams, kept logits; rows whose ids differ from their inputs).
. benchmarks/_dec.sh
out_dir s39g
t0=$SECONDS
ptest ahead 170 tests/runtime/test_gpu_ahead.py -s
pack
echo "== done at $((SECONDS - t0)) s"

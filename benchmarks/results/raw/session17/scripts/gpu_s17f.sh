#!/usr/bin/env bash
# Session 17, fifth device call (one GPU): the recurrent GDN kernels load the committed state before their PDL wait.
# Their GPU tests (fused and unfused, steps / windows / trees against the twin), the runtime GPU tier, then decode at
# 1 / 8 streams for 2B, 9B, 27B (most important first: the call may be cut at the session's device budget).
. benchmarks/_dec.sh
out_dir s17f
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_fused.py \
    tests/kernels/test_gpu_delta_sample.py -k "not greedy and not sampled" >"$R/gdn_tests.txt" 2>&1
echo "== gdn tests rc $?"; tail -n 2 "$R/gdn_tests.txt"; pack
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/runtime >"$R/rt_tests.txt" 2>&1
echo "== runtime tests rc $?"; tail -n 2 "$R/rt_tests.txt"; pack
dec 2b 2b; pack
dec 9b 9b; pack
dec 27b 27b; pack

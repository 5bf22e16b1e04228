#!/usr/bin/env bash
# Session 28, call 2 (one GPU, under 10 minutes, the session's last device time): 9B decode, the default qgemv
# prologue (PRE=1, XQ=0) against call 1's kernel winners (PRE=2 + XQ=1), alternated twice in one process
# (bench_decode --ab-env: the graphs recaptured under each set). Prediction: +2-4 % at one stream (about 1-1.5 us
# a launch over 97 qgemv launches of a 2.8 ms step). Beside it (nice'd, compile-bound): the fused GDN kernel's GPU
# tests (session 27's one-round-trip norm loads) and the qgemv prefetch / mid-shape / deferred GPU tests under
# PRE=2 + XQ=1. They may overlap round 1's timing; round 2 runs after them.
. benchmarks/_dec.sh
out_dir s28c
t0=$SECONDS
(nice -n 10 bash -c '. benchmarks/_dec.sh; R='"$R"'; ptest fused 240 tests/kernels/test_gpu_fused.py') &
(nice -n 10 bash -c '. benchmarks/_dec.sh; R='"$R"'; TENSORFOLD_GEMV3_PRE=2 TENSORFOLD_GEMV3_XQ=1 ptest qb 240 tests/kernels/test_gpu_qgemv.py -k "prefetch or mid_shapes or deferred"') &
timeout 540 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --prompts "" --steps 40 \
    --ab-env "TENSORFOLD_GEMV3_PRE=1 TENSORFOLD_GEMV3_XQ=0;TENSORFOLD_GEMV3_PRE=2 TENSORFOLD_GEMV3_XQ=1" \
    --ab-rounds 2 --out "$R/decode_9b_ab.md" >"$R/decode_9b_ab.txt" 2>&1
echo "== ab rc $? at $((SECONDS - t0)) s"; grep -h "decode\|rror" "$R/decode_9b_ab.txt" | head -12
wait
echo "== tests at $((SECONDS - t0)) s"; grep -h "passed\|failed" "$R"/fused.txt "$R"/qb.txt | tail -4
pack
echo "== done at $((SECONDS - t0)) s"

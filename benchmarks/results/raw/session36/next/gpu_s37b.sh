#!/usr/bin/env bash
# Prepared in session 36: (1) the runner's fused norms on the GPU at 2B (default plans, and every linear on qgemv):
# prompt, one-row steps and a 6-stream step give the same logits with and without them, bit for bit;
# the exactness tests that compare one-row steps against multi-row forwards, run with the fusion on (a one-row step
# fuses, a window or a multi-stream step does not: these now compare the two paths).
# (2) 27B decode A/B/C (both, NORM only, neither). Prediction (low confidence, see gpu_s37a.sh): one stream +0.5 to
# +3 % with NORM, +0.3 to +1 % more with GNORM; 8 streams +0.3 to +1 % (GNORM only).
. benchmarks/_dec.sh
out_dir s37b
t0=$SECONDS
export TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=1  # fused_norm sets its own; the others run fused
ptest fuse_rt 330 tests/runtime/test_gpu_runtime.py -k "fused_norm or window_tree or alone_vs_batched" -s
unset TENSORFOLD_NORM_FUSE TENSORFOLD_GNORM_FUSE
pack
AB="TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=1;TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=0"
AB="$AB;TENSORFOLD_NORM_FUSE=0 TENSORFOLD_GNORM_FUSE=0"
timeout 230 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 30 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_27b.md" > "$R/decode_27b.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \[\|Error" "$R/decode_27b.txt" | head -8
pack
echo "== done at $((SECONDS - t0)) s"

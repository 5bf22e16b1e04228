#!/usr/bin/env bash
# Prepared in session 23 for the next session's first device call (one GPU, about 6-7 minutes; gpu_s24b.sh is
# the 27B half).
# 1. GPU tier, side by side (own kernel caches; nothing timed): the deferred split-K completion (d0e8f1e,
#    TENSORFOLD_GEMV_DEFER=1: same logits as the in-kernel completion, prompts and steps, 2B with every linear on
#    qgemv), the add + RMSNorm kernels, and the whole qgemv file (call 3 of session 23 ran 17 of its 21 tests
#    before its time ran out).
# 2. Decode A/B in one call: defer off / on at 9B and 27B; 27B also with 5120 x 6144 at cg 32 (session 23, call 1:
#    14.2 / 20.6 -> 13.4 / 17.4 us at 1 / 8 rows).
# Prediction: the completion costs about 1.5-2 us a launch at one row (the fence, an L2 round trip for the
# arrival count, the completing warp's pass over ks partials); the add + RMSNorm gains about 0.3 us reading ks
# rows. 9B: 32 down launches defer -> one stream +1-2 %; 27B: 64 down + 64 output projections -> +2-4 %. Eight
# streams gain more where the completion reads 8 x ks partials (27B down ks 17).
. benchmarks/_dec.sh
out_dir s24a
t0=$SECONDS
ptest defer 300 tests/runtime/test_gpu_runtime.py -k "deferred or swept" &
ptest qgemv 330 tests/kernels/test_gpu_qgemv.py &  # includes test_deferred_completion_real_shapes
ptest norms 300 tests/kernels/test_gpu_a.py -k "norm" &
wait; pack
echo "== tests done at $((SECONDS - t0)) s"
dec 9b 9b; pack
TENSORFOLD_GEMV_DEFER=1 dec 9b_defer 9b; pack
echo "== done at $((SECONDS - t0)) s"

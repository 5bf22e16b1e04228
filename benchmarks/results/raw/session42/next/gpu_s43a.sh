#!/usr/bin/env bash
# Prepared in session 42 (no GPU was lent that session). First call of session 43, about 7-8 minutes warm.
# (1) GPU tests of the fused GDN kernels (and the whole-form SwiGLU GEMV) FIRST: the opt-in cluster tail (TENSORFOLD_GDN_CLUSTER=1, never run on a
#     GPU) against the counter tail and the three-launch path, bit for bit, at 2B / 9B / 27B head counts. If it
#     fails or hangs (timeout 220 s), the A/B below runs its cluster sets with the counter tail instead.
# (2) One process per geometry, five settings alternated over two rounds (bench_decode --ab-env), tok/s at 1 and 8
#     streams (the fused GDN step runs only at <= 2 rows: eight streams are a control):
#   old     : DIAG=late: the fused GDN step before session 42 (gate loads a / b after the conv's barrier)
#   early   : CLUSTER=0: the default since session 42: a / b loaded before the conv's loads (same bits).
#             Predicted +0.3 to +0.9 % at one stream (one L2 round trip off each GDN layer: 2B 18, 9B 24 a step)
#   cluster : CLUSTER=1: early + the cluster tail (a head's 8 slice blocks as one cluster, the norm read from
#             distributed shared memory: no fence, no atomic, no L2 re-read of o). Predicted 1-2 us a GDN layer
#             more: 2B +1.5 to +3 %, 9B +1 to +2 % at one stream
#   notail  : DIAG=notail. DIAGNOSTIC, wrong results: no arrival fence / counter / norm at all: the bound
#   half    : (9B) CLUSTER=1 + TENSORFOLD_TC_WHOLE_HALF=1 (session 41, unmeasured): predicted 9B one stream +0.5 to
#             +1 %
#   whole1  : (2B) CLUSTER=1 + TENSORFOLD_TC_WHOLE=1: the whole-share form on every one-row first-kernel launch it
#             fits (2B in_all, qkv, down; default sq: the square out_proj / o_proj only), never measured. Predicted
#             2B one stream +0 to +2 % (session 40: the square launch 4.5 -> 4.4 us; the down holds 6 groups a warp)
#   wglu    : (2B) whole1 + TENSORFOLD_TC_WHOLE_GLU=1 (built in session 42): the gate | up launch with the SwiGLU
#             epilogue in the whole form too (8 groups a warp, 3 blocks an SM). Predicted 10.8 -> 9.5-10 us a
#             launch, 2B one stream +1 to +2 % over whole1
. benchmarks/_dec.sh
out_dir s43a
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
ptest fused 220 tests/kernels/test_gpu_fused.py tests/kernels/test_gpu_glu.py::test_glu_whole_form_2b -s
pack
# a failed or hung cluster test: every cluster set below runs with the counter tail instead (no hang in the A/B)
if grep -q "FAILED tests/kernels/test_gpu_fused\|^ERROR" "$R/fused.txt" || ! grep -q " passed" "$R/fused.txt"; then
    CL=0; else CL=1; fi
echo "== cluster sets on: $CL"
AB="TENSORFOLD_GDN_DIAG=late;TENSORFOLD_GDN_CLUSTER=0;TENSORFOLD_GDN_CLUSTER=1;TENSORFOLD_GDN_DIAG=notail"
for g in 9b 2b; do
    if [ $g = 9b ]; then X="TENSORFOLD_GDN_CLUSTER=1 TENSORFOLD_TC_WHOLE_HALF=1"; T=240
    else X="TENSORFOLD_GDN_CLUSTER=1 TENSORFOLD_TC_WHOLE=1;TENSORFOLD_GDN_CLUSTER=1 TENSORFOLD_TC_WHOLE=1"
         X="$X TENSORFOLD_TC_WHOLE_GLU=1"; T=170; fi
    SETS="$AB;$X"
    [ $CL = 1 ] || SETS=${SETS//TENSORFOLD_GDN_CLUSTER=1/TENSORFOLD_GDN_CLUSTER=0}
    timeout $T python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --ab-env "$SETS" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:\|wrote\|loaded" "$R/ab_$g.txt" | head -24; pack
done
echo "== done at $((SECONDS - t0)) s"

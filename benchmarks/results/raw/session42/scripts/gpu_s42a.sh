#!/usr/bin/env bash
# Session 42, call 1. One process per geometry, five kernel settings alternated over two rounds (bench_decode
# --ab-env), tok/s at 1 and 8 streams (the fused GDN step runs only at <= 2 rows: eight streams are a control):
#   old     : CLUSTER=0 DIAG=late: the fused GDN step as before session 42 (gate loads after the conv's barrier)
#   early   : CLUSTER=0: gate inputs a / b loaded before the conv's loads (same bits). Predicted +0.3 to +0.9 % at
#             one stream (one L2 round trip, ~0.5-0.7 us, off each GDN layer: 2B 18, 9B 24 layers a step)
#   cluster : CLUSTER=1 (the new default): early + the cluster tail (a head's 8 slice blocks as one cluster, the norm
#             from distributed shared memory: no fence, no atomic, no L2 re-read). Predicted a further 1-2 us a
#             GDN layer: 2B +1.5 to +3 %, 9B +1 to +2 % at one stream
#   notail  : CLUSTER=0 DIAG=notail. DIAGNOSTIC, wrong results: no arrival fence / counter / norm: the bound
#   half    : cluster + TENSORFOLD_TC_WHOLE_HALF=1 (session 41, unmeasured): predicted 9B one stream +0.5 to +1 %
# Then the GPU tests of the fused GDN kernels (cluster tail == counter tail == three launches, bit for bit).
. benchmarks/_dec.sh
out_dir s42a
t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$R/gpu.txt"; cat "$R/gpu.txt"
AB="TENSORFOLD_GDN_CLUSTER=0 TENSORFOLD_GDN_DIAG=late;TENSORFOLD_GDN_CLUSTER=0;TENSORFOLD_GDN_CLUSTER=1"
AB="$AB;TENSORFOLD_GDN_CLUSTER=0 TENSORFOLD_GDN_DIAG=notail;TENSORFOLD_TC_WHOLE_HALF=1"
for g in 9b 2b; do
    timeout 200 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 100 --ab-env "$AB" --ab-rounds 2 --out "$R/ab_$g.md" > "$R/ab_$g.txt" 2>&1
    echo "== ab $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \|Error\|rror:\|wrote\|loaded" "$R/ab_$g.txt" | head -24; pack
done
ptest fused 150 tests/kernels/test_gpu_fused.py -s
pack
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Session 39, call 2. (1) GPU test of the first tensor-core kernel's L2 prefetch (TENSORFOLD_TC_L2; same bits at
# the 2B / 9B square shapes). (2) Per geometry (2B, 9B), one process: the timeline at one stream with the ids chain
# in the graphs and TC_L2=sq (to read the out_proj / o_proj exposed time against call 1's), then the decode A/B,
# two rounds, 1 and 8 streams:
#   base  CHAIN_GRAPH=1 (call 1: +0.3 to +0.8 % at one 2B stream over 0, a tie at 9B and at eight streams)
#   sq    + TC_L2=sq: the GDN out_proj and the attention o_proj (square weights, first tensor-core kernel) ask L2
#         for their whole weight while the GDN step / the merge runs (a window that moves little memory).
#         Prediction: 9B out_proj exposed 10.5 -> 5-7 us (H100 timeline, call 1), 32 launches: +3 to +5 % at one
#         stream; 2B out_proj 4.1 us exposed already: +0 to +1 %.
#   all   + TC_L2=1 (every first-kernel launch, also behind the norms: a window of 2-3 us): 2B unknown, maybe worse.
#   pre3  (9B) qgemv's GEMV3_PRE=3 (the first 2 tiles' runs into L2 before the wait; s28 lost in a standalone
#         same-kernel chain, never measured in decode).
. benchmarks/_dec.sh
out_dir s39e
t0=$SECONDS
ptest l2test 200 tests/kernels/test_gpu_gemv.py -k "l2_prefetch"
C="TENSORFOLD_CHAIN_GRAPH=1 TENSORFOLD_GEMV3_PRE=2"
for g in 2b 9b; do
    AB="$C TENSORFOLD_TC_L2=0;$C TENSORFOLD_TC_L2=sq;$C TENSORFOLD_TC_L2=1"
    [ $g = 9b ] && AB="$AB;TENSORFOLD_CHAIN_GRAPH=1 TENSORFOLD_TC_L2=0 TENSORFOLD_GEMV3_PRE=3"
    TENSORFOLD_CHAIN_GRAPH=1 TENSORFOLD_TC_L2=sq timeout 230 python3 benchmarks/bench_decode.py --geometry $g \
        --root /tmp/tfm --streams 1,8 --prompts "" --steps 60 --timeline 1 --ab-env "$AB" --ab-rounds 2 \
        --out "$R/decode_$g.md" > "$R/decode_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "sums a step\|decode \[" "$R/decode_$g.txt" | head -20
    gzip -f "$R"/timeline_*.json 2>/dev/null; pack
done
echo "== done at $((SECONDS - t0)) s"

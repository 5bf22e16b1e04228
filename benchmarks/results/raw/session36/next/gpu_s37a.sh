#!/usr/bin/env bash
# Prepared in session 36 (no device was lent that session): two norms fused into GEMVs, both off by default until
# this runs. TENSORFOLD_NORM_FUSE=1: a one-row step issues no add_rms_norm launch; the GEMV that reads x (in_proj,
# q/k/v, gate | up, the head) reduces the residual row in every block, writes its K range of x and of the residual
# (into a second buffer), and reads x from there. TENSORFOLD_GNORM_FUSE=1: the GDN gated norm moves from the fused
# GDN step's serial tail (fence, per-head counter, last block re-reading o) into out_proj's prologue (every row
# count; heads lie whole in a block's K range).
# Cost model (session 35's profiles): 2B 48 add_rms_norm launches 128 us of a 1,257 us step, 9B 64 launches 195 us
# of 2,515. A fused prologue adds about one L2 round trip + a block reduction (~1 us) to each consumer GEMV.
# (1) decode A/B/C, one process per geometry, 2 rounds: both, NORM only, neither. Predictions: NORM at one stream
# 2B +4 to +7 % (750 -> ~790 tok/s), 9B +3 to +5 % (375 -> ~390), 8 streams within 1 % (eight rows never fuse);
# GNORM on top: 2B +2 to +4 % at one stream and +1 to +3 % at eight, 9B +1.5 to +3 %. The log counts fused norms.
# (2) the kernel GPU tier at the real shapes (fused == standalone + GEMV, bit for bit). Prediction: pass.
. benchmarks/_dec.sh
out_dir s37a
t0=$SECONDS
AB="TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=1;TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=0"
AB="$AB;TENSORFOLD_NORM_FUSE=0 TENSORFOLD_GNORM_FUSE=0"
for g in 2b 9b; do
    timeout 170 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 60 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_$g.md" > "$R/decode_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \[\|Error" "$R/decode_$g.txt" | head -12; pack
done
ptest fuse_k 240 tests/kernels/test_gpu_norm_fuse.py -s
pack
echo "== done at $((SECONDS - t0)) s"

#!/usr/bin/env bash
# Prepared in session 36 (no device was lent that session): two norms fused into GEMVs, both off by default until
# this runs. TENSORFOLD_NORM_FUSE=1: a one-row step issues no add_rms_norm launch; the GEMV that reads x (in_proj,
# q/k/v, gate | up, the head) reduces the residual row in every block and makes its K range of x in shared memory,
# where its main loop reads it (x and the residual, into a second buffer, also go out). TENSORFOLD_GNORM_FUSE=1: the GDN gated norm moves from the fused
# GDN step's serial tail (fence, per-head counter, last block re-reading o) into out_proj's prologue (heads lie
# whole in a block's K range; launches of few rows).
# History: session 18 fused the add + RMSNorm into the first kernel's x loads at every row count (each x load in the
# main loop computed (h + d) * inv * mult from three loads): its kernels ran 2.7-3.3 us slower and 2B decode lost 7 %
# (1 stream) and 18 % (8 streams); LEDGER section 3. This form differs: one row only; the block makes its x once in
# shared memory (the main loop reads it there, 16-byte shared loads), so against the plain GEMV, which waits one L2
# round trip for x, it adds the block sum and two barriers (~0.3-0.5 us), and it saves the norm launch's boundary
# and its own round trips (~1-2 us in the PDL chain; s35's profile: 2.7 us a launch alone, 128 us of a 2B step).
# (1) decode A/B/C, one process per geometry, 2 rounds: both, NORM only, neither. Predictions (low confidence):
# NORM at one stream 2B +1 to +5 %, 9B +1 to +4 %, eight streams within 1 % (eight rows never fuse). GNORM on top
# (the tail's fence + counter round trip + o re-read, ~2.5-3 us, against ~1-1.5 us in out_proj's prologue): one
# stream 2B +1 to +2 %, 9B +0.5 to +1.5 %; eight streams unchanged (eight rows keep the tail: affine.gnorm_fusable).
# The log line counts fused norms.
# Time: each process writes its synth model, loads cold (compile workers), and compiles the fused kernels in-process
# at their first capture (~15 s each for qgemv's); hence the long timeouts. The GPU tests are in gpu_s37b.sh.
. benchmarks/_dec.sh
out_dir s37a
t0=$SECONDS
AB="TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=1;TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=0"
AB="$AB;TENSORFOLD_NORM_FUSE=0 TENSORFOLD_GNORM_FUSE=0"
for g in 2b 9b; do
    timeout 270 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm --streams 1,8 --prompts "" \
        --steps 60 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_$g.md" > "$R/decode_$g.txt" 2>&1
    echo "== $g rc $? at $((SECONDS - t0)) s"; grep -h "decode \[\|Error" "$R/decode_$g.txt" | head -12; pack
done
echo "== done at $((SECONDS - t0)) s"

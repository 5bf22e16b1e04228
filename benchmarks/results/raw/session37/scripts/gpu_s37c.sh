#!/usr/bin/env bash
# Prepared in session 36: 27B decode A/B/C of the fused norms (both, NORM only, neither), one process, 2 rounds.
# Prediction (low confidence, see gpu_s37a.sh): one stream +0.5 to +3 % with NORM, +0.3 to +1 % more with GNORM;
# eight streams unchanged.
. benchmarks/_dec.sh
out_dir s37c
t0=$SECONDS
AB="TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=1;TENSORFOLD_NORM_FUSE=1 TENSORFOLD_GNORM_FUSE=0"
AB="$AB;TENSORFOLD_NORM_FUSE=0 TENSORFOLD_GNORM_FUSE=0"
timeout 560 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 30 --ab-env "$AB" --ab-rounds 2 --out "$R/decode_27b.md" > "$R/decode_27b.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \[\|Error" "$R/decode_27b.txt" | head -12
pack
echo "== done at $((SECONDS - t0)) s"

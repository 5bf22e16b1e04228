#!/usr/bin/env bash
# Session 27, call 3 (one GPU): the qgemv GPU tests with the batched completion (the default, CMP=2; call 2's run
# stopped at its 150 s limit after 9 passes), split three ways side by side; the 27B decode with it; then the
# completion's fences, membar.gl (CMP=2) against fence.acq_rel.gpu (CMP=3), at 9B gate+up and 27B down, one row.
. benchmarks/_dec.sh
out_dir s27c
t0=$SECONDS
F=tests/kernels/test_gpu_qgemv.py
ptest qa 230 $F -k "rows_1_to_16 or formats or through" &
ptest qb 230 $F -k "prefetch or mid_shapes or deferred" &
ptest qc 230 $F -k "swept or bf16" &
wait
echo "== tests at $((SECONDS - t0)) s"; pack
timeout 220 python3 benchmarks/bench_decode.py --geometry 27b --root /tmp/tfm --streams 1,8 --prompts "" \
    --steps 30 --out "$R/decode_27b.md" >"$R/decode_27b.txt" 2>&1
echo "== 27b rc $? at $((SECONDS - t0)) s"; grep -h "decode \|rror" "$R/decode_27b.txt" | head -4; pack
for c in 3 2; do
TENSORFOLD_GEMV3_CMP=$c timeout 60 python3 benchmarks/bench_gemv3.py --shapes 2,5 --rows 1 --swept --glu \
    --only-sw --no-old --out "$R/g3_c$c" >"$R/gemv3_c$c.txt" 2>&1
echo "== gemv3 c$c rc $? at $((SECONDS - t0)) s"; grep -h " us " "$R/gemv3_c$c.txt" | head -8; pack
done
echo "== done at $((SECONDS - t0)) s"

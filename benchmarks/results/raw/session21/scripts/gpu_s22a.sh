#!/usr/bin/env bash
# Prepared in session 21 for the next session's first device call (one GPU, about 7 minutes); session 21's own
# try (gpu_s21d.sh, the same first two steps) was refused: too little device time was left.
# bf16-only x with 1-4-row launches on the hi + lo loop with zero lo columns (xh 2; SASS loop 969 instructions
# against 1,000 for hi + lo and 1,132 for the 8-row form, 9B gate+up SwiGLU) and 5-8-row launches on the 8-row
# form (xh 1). If one stream is back at the hi + lo figure, make TENSORFOLD_GEMV3_XH=1 the default
# (qgemv._xh_on) and note that the decode GEMVs then round x to bf16.
# Prediction: 9B one stream back to the hi + lo figure (338-347 tok/s) or a little above; 8 streams as call 2-3's
# xh (1,800-1,840 tok/s). The GPU test checks 1-4-row launches bit-equal to rows of 8-row launches on the H200.
. benchmarks/_dec.sh
out_dir s22a
timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_gpu_qgemv.py \
    -k "bf16_x and 9B" >"$R/qgemv_xh.txt" 2>&1
echo "== qgemv gpu rc $?"; tail -2 "$R/qgemv_xh.txt"; pack
TENSORFOLD_GEMV3_XH=1 dec 9b_xh 9b; pack
timeout 200 python3 benchmarks/bench_gemv3.py --shapes 2,3,4,5 --rows 1,4,8 --swept --only-sw --glu --xh --no-old \
    --out "$R" >"$R/gemv3_xz.txt" 2>&1
echo "== bench rc $?"; grep " sw" "$R/gemv3_xz.txt"; pack
dec 9b 9b; pack
TENSORFOLD_GEMV3_XH=1 dec 27b_xh 27b; pack
dec 27b 27b; pack
TENSORFOLD_GEMV3_XH=1 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/runtime/test_gpu_runtime.py >"$R/runtime_xh.txt" 2>&1
echo "== runtime xh rc $?"; tail -3 "$R/runtime_xh.txt"; pack
# the 9B out_proj / o_proj (4096 x 4096, 10.5 % of the 9B step on the first kernel's pipe2 plan): qgemv on the MLX
# and swept layouts, hi + lo and bf16 x, against the first kernel's default plan
timeout 120 python3 benchmarks/bench_gemv3.py --shapes - --custom "4096,4096" --rows 1,8 --swept --xh \
    --out "$R/oproj" >"$R/gemv3_oproj.txt" 2>&1
echo "== oproj rc $?"; grep "R=" "$R/gemv3_oproj.txt"; pack

#!/usr/bin/env bash
# Session 22, call 3 (one GPU): issue 3's kernel benchmark at HEAD with its peers. bench_kernels.py's new "decode"
# group (every decode GEMV of the 2B / 9B / 27B step as the runtime plans it: swept layout, bf16-only x, SwiGLU
# epilogue; 1 and 8 rows; torch bf16 matmul beside it), then part B's delta rule (now with the fused decode step
# on DRAM-resident state copies), attention, norms, sampling and fla's delta-rule kernels as the peer; then 2B
# decode at 1 / 8 streams if time is left. bench_kernels writes its table after every group, so a cut keeps rows.
. benchmarks/_dec.sh
out_dir s22c
python3 -m pip install -q --no-index --no-deps --target /tmp/site ../.whl/fla*.whl >"$R/pip.txt" 2>&1
echo "== pip rc $?"
timeout 290 python3 benchmarks/bench_kernels.py --only decode --out "$R/decode" >"$R/kernels_decode.txt" 2>&1
echo "== decode rc $? at ${SECONDS}s"; grep -c " | " "$R/kernels_decode.txt"; pack
left=$((500 - SECONDS))
timeout $((left > 60 ? left : 60)) python3 benchmarks/bench_kernels.py --only gdn,fla,norm,sample,attention \
    --out "$R/other" >"$R/kernels_other.txt" 2>&1
echo "== other rc $? at ${SECONDS}s"; grep -c " | " "$R/kernels_other.txt"; pack
if [ $SECONDS -lt 440 ]; then dec 2b 2b; pack; fi
echo "== done at ${SECONDS}s"

#!/usr/bin/env bash
# Session 18, seventh device call: does programmatic dependent launch overlap consecutive decode kernels at 2B?
# Nsight Systems with CUDA-graph node tracing over a short one-stream decode; the GPU trace (every kernel's start
# and end) goes back gzipped for an offline overlap analysis.
. benchmarks/_dec.sh
out_dir s18g
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "== nsys: ${NSYS:-none}"
[ -n "$NSYS" ] || exit 0
timeout 220 "$NSYS" profile --cuda-graph-trace=node -t cuda --force-overwrite true -o /tmp/p \
    python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1 --prompts 512 --steps 12 \
    --out "$R/decode.md" >"$R/nsys.txt" 2>&1
echo "== nsys rc $?"; grep -h "decode \|Error" "$R/nsys.txt" | head -3
timeout 60 "$NSYS" stats --report cuda_gpu_trace --format csv --output /tmp/trace /tmp/p.nsys-rep >/dev/null 2>&1
echo "== stats rc $?"; ls /tmp/trace* 2>/dev/null; gzip -c /tmp/trace*.csv > "$R/gpu_trace.csv.gz" 2>/dev/null
ls -la "$R"; pack

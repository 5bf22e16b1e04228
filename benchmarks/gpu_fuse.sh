#!/bin/bash
# One device call for the fused GDN layer kernel (delta_rule.launch_fused, TENSORFOLD_GDN_FUSED):
#   1. its GPU tier (tests/kernels/test_gpu_fused.py, 2B / 9B / 27B shapes);
#   2. 2B decode at 1 and 8 streams with the three-launch path (before) and the per-kernel profile of one stream;
#   3. the same with the fused kernel (after), then the runtime GPU tests (tests/runtime) in that process with the
#      fused kernel on (they share its compiled kernels).
# Logs go to $OUT as they are written. Usage (device): OUT=$OUT TF_COMMIT=<sha> bash benchmarks/gpu_fuse.sh
set -u
OUT=${OUT:-/tmp/fuse_out}
mkdir -p "$OUT"
T_KT=${T_KT:-60}
T_BEFORE=${T_BEFORE:-100}
T_AFTER=${T_AFTER:-235}
BENCH="benchmarks/bench_decode.py --geometry 2b --streams 1,8 --prompts 512 --steps 30 --profile 1"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
t0=$(date +%s)
TENSORFOLD_GDN_FUSED=1 timeout "$T_KT" python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests/kernels/test_gpu_fused.py \
  > "$OUT/kernel_tests.txt" 2>&1
echo "kernel tests rc=$? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/session.log"
TENSORFOLD_GDN_FUSED=0 timeout "$T_BEFORE" python3 $BENCH --out "$OUT/before.md" > "$OUT/before.log" 2>&1
echo "before rc=$? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/session.log"
TENSORFOLD_GDN_FUSED=1 timeout "$T_AFTER" python3 $BENCH --out "$OUT/after.md" \
  --tests "-m gpu -q -p no:cacheprovider -rA tests/runtime" > "$OUT/after.log" 2>&1
echo "after rc=$? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/session.log"
grep -h "profile\|decode \|prompt \|passed\|failed\|error" "$OUT/before.log" "$OUT/after.log" | head -80
tail -3 "$OUT/kernel_tests.txt"

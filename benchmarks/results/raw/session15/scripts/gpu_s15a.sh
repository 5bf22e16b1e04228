#!/usr/bin/env bash
# Session 15, call 1 (one GPU): Nsight Compute on the decode GEMVs and the prompt GEMM (stall reasons), then the
# opt-in hi-only prompt GEMM (TENSORFOLD_GEMM_XLO=0) against the default at 2B prompts 4,096 / 16,384, its effect on
# the prompt-vs-step KL test, and a 9B one-stream per-kernel profile.
set -u
OUT=${OUT:-/tmp/s15a}
R=$OUT/r
mkdir -p "$R"
export TENSORFOLD_CACHE_DIR=/tmp/tfkc
NCU=/usr/local/cuda/bin/ncu
timeout 200 $NCU --target-processes all --kernel-name regex:'qgemv|tc3gemm|xprep' --launch-count 40 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy --section InstructionStats --section SchedulerStats --csv --page details \
    python3 benchmarks/ncu_probe.py --reps 0 >"$R/ncu.csv" 2>"$R/ncu.err"
echo "== ncu rc $?"; head -c 1500 "$R/ncu.err"; wc -l "$R/ncu.csv"
pr() {  # name, env...
    local n=$1; shift
    env "$@" timeout 200 python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm --streams 1 \
        --prompts 512,4096,16384 --steps 10 --out "$R/prompt_$n.md" >"$R/prompt_$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "decode \|prompt \|Error" "$R/prompt_$n.txt" | head -6
}
pr xlo1 TENSORFOLD_GEMM_XLO=1
pr xlo0 TENSORFOLD_GEMM_XLO=0
TENSORFOLD_GEMM_XLO=0 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short \
    tests/runtime/test_gpu_runtime.py -k "prompt_vs_step" >"$R/kl_xlo0.txt" 2>&1
echo "== kl xlo0 rc $?"; tail -n 3 "$R/kl_xlo0.txt"
timeout 200 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1 --prompts 512 --steps 20 \
    --profile 1 --out "$R/prof_9b.md" >"$R/prof_9b.txt" 2>&1
echo "== prof 9b rc $?"; head -40 "$R/prof_9b.txt"
tar -czf "$OUT/s15a.tar.gz" -C "$OUT" r

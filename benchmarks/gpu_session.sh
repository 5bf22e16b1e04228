#!/usr/bin/env bash
# One device session: the GPU test tier, perplexity of the embedded default model, decode/prompt throughput,
# the server benchmark against `tensorfold serve` on the cuda backend, and (optionally) the 27B geometry. Each part
# has its own time cap so that one slow part cannot take the others' results with it. Results go to $OUT (default
# benchmarks/results/gpu_session). PARTS picks the parts (default: tests,ppl,decode,serve).
#
#   TF_COMMIT=$(git rev-parse --short HEAD) OUT=/some/dir PARTS=tests,ppl,decode,serve,big bash benchmarks/gpu_session.sh
#
# Two tracks on a two-GPU machine: run two copies with CUDA_VISIBLE_DEVICES=0 / 1, their own OUT and PORT.
#
# On the lent H200 the image's numpy 2.5 breaks numba-cuda: install the carried numpy 2.4.6 wheel first
# (docs in ../shared/docs/gpu.md).
set -u
OUT=${OUT:-benchmarks/results/gpu_session}
mkdir -p "$OUT"
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1
PY=${PY:-python3}
PARTS=${PARTS:-tests,ppl,decode,serve}
T_TESTS=${T_TESTS:-240}
T_DECODE=${T_DECODE:-150}
T_SERVE=${T_SERVE:-70}
T_PPL=${T_PPL:-60}
T_BIG=${T_BIG:-300}
ROOT=${ROOT:-/tmp/tfmodels}
PORT=${PORT:-8899}
LOG="$OUT/session.log"

has() { case ",$PARTS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$LOG"
echo "commit ${TF_COMMIT:-unknown}, parts $PARTS" | tee -a "$LOG"

if has gemv; then
    # decode GEMV variants: GPU test of every variant, then the variant table; the variant that passed and is
    # fastest (sum over shapes of the 1-row time + half the 8-row time) is written to $VARIANT_FILE for later parts
    echo "== GEMV variants: GPU tests and timing" | tee -a "$LOG"
    timeout "${T_GEMV_TESTS:-150}" $PY -m pytest -m gpu -q -p no:cacheprovider -W ignore -rfE \
        tests/kernels/test_gpu_gemv.py >"$OUT/gemv_gpu_tests.txt" 2>&1
    echo "pytest exit code $?" >>"$OUT/gemv_gpu_tests.txt"
    tail -15 "$OUT/gemv_gpu_tests.txt" | tee -a "$LOG"
    timeout "${T_GEMV_BENCH:-130}" $PY benchmarks/bench_kernels.py --no-b --only affine --out "$OUT" \
        >"$OUT/gemv_bench.txt" 2>&1
    grep -E "^\| |FASTEST" "$OUT/gemv_bench.txt" | tail -12 | tee -a "$LOG"
    $PY benchmarks/pick_gemv_variant.py "$OUT" "$OUT/gemv_gpu_tests.txt" >"${VARIANT_FILE:-/tmp/tf_variant}" \
        2>>"$LOG"
    echo "chosen GEMV variant: $(cat "${VARIANT_FILE:-/tmp/tf_variant}")" | tee -a "$LOG"
fi
if [ -s "${VARIANT_FILE:-/tmp/tf_variant}" ]; then
    export TENSORFOLD_GEMV_VARIANT=$(cat "${VARIANT_FILE:-/tmp/tf_variant}")
    echo "TENSORFOLD_GEMV_VARIANT=$TENSORFOLD_GEMV_VARIANT" | tee -a "$LOG"
fi

if has gemv3; then
    # qgemv (the bandwidth-oriented tensor-core decode GEMV): its GPU tests, then geometries against the old kernel
    echo "== qgemv: GPU tests and timing" | tee -a "$LOG"
    timeout "${T_GEMV3_TESTS:-150}" $PY -m pytest -m gpu -q -p no:cacheprovider -W ignore -rfE \
        tests/kernels/test_gpu_qgemv.py >"$OUT/gemv3_gpu_tests.txt" 2>&1
    echo "pytest exit code $?" >>"$OUT/gemv3_gpu_tests.txt"
    tail -15 "$OUT/gemv3_gpu_tests.txt" | tee -a "$LOG"
    timeout "${T_GEMV3_BENCH:-220}" $PY benchmarks/bench_gemv3.py --configs "${GEMV3_CONFIGS:-4,1,4,1,396}" \
        --rows "${GEMV3_ROWS:-1,8}" --shapes "${GEMV3_SHAPES:-}" --out "$OUT" 2>&1 | tee "$OUT/gemv3_bench.txt" \
        | tee -a "$LOG"
fi

NORM_FLAG=${NORM_FLAG:-/tmp/tf_norm_vec}
if has norm; then
    # the vectorized add+RMSNorm / RMSNorm (opt-in until checked on a GPU): its GPU tests, then its timing; when
    # the tests pass, "1" goes to $NORM_FLAG and later parts (of this track and of a second track) use it
    echo "== vectorized norms: GPU tests and timing" | tee -a "$LOG"
    timeout "${T_NORM:-90}" $PY -m pytest -m gpu -q -p no:cacheprovider -W ignore -rfE tests/kernels/test_gpu_a.py \
        -k "norm" >"$OUT/norm_gpu_tests.txt" 2>&1
    rc=$?
    echo "pytest exit code $rc" >>"$OUT/norm_gpu_tests.txt"
    tail -5 "$OUT/norm_gpu_tests.txt" | tee -a "$LOG"
    if [ $rc = 0 ]; then echo 1 >"$NORM_FLAG.tmp"; else echo 0 >"$NORM_FLAG.tmp"; fi
    mv "$NORM_FLAG.tmp" "$NORM_FLAG"
    timeout "${T_NORM_BENCH:-60}" $PY benchmarks/bench_kernels.py --no-b --only norm --out "$OUT" \
        >"$OUT/norm_bench.txt" 2>&1
    grep -E "^\| " "$OUT/norm_bench.txt" | tail -12 | tee -a "$LOG"
fi
if has synth; then  # write the synth checkpoints now (the GPU is not needed), so the norm flag can arrive meanwhile
    for g in ${SYNTH_GEOMS:-27b}; do
        timeout "${T_SYNTH:-150}" $PY - "$g" "$ROOT" <<'PYEOF' 2>&1 | tee -a "$LOG"
import sys, time
from pathlib import Path
sys.path.insert(0, "benchmarks")
from bench_decode import write_synth_any
g, root = sys.argv[1], sys.argv[2]
d = Path(root) / f"synth-{g}-4bit-g64"
if not (d / "config.json").exists():
    t = time.perf_counter()
    write_synth_any(g, d, bits=4, group_size=64)
    print(f"[{g}] wrote synth in {time.perf_counter() - t:.1f} s")
PYEOF
    done
fi
use_norm_flag() {  # wait up to $1 s for the norm flag; export TENSORFOLD_NORM_VEC=1 when it says the tests passed
    for _ in $(seq 1 "$1"); do [ -f "$NORM_FLAG" ] && break; sleep 1; done
    if [ "$(cat "$NORM_FLAG" 2>/dev/null)" = 1 ]; then
        export TENSORFOLD_NORM_VEC=1
    fi
    echo "TENSORFOLD_NORM_VEC=${TENSORFOLD_NORM_VEC:-0} (flag: $(cat "$NORM_FLAG" 2>/dev/null || echo none))" | tee -a "$LOG"
}
if [ -n "${WAIT_NORM:-}" ]; then use_norm_flag "$WAIT_NORM"; fi

if has tests; then
    echo "== GPU tests" | tee -a "$LOG"
    timeout "$T_TESTS" $PY -m pytest -m gpu -q -p no:cacheprovider -W ignore -ra ${GPU_TESTS:-tests} \
        >"$OUT/gpu_tests.txt" 2>&1
    echo "pytest exit code $?" >>"$OUT/gpu_tests.txt"
    grep -E "passed|failed|error|PASS|FAIL|exit code" "$OUT/gpu_tests.txt" | tail -30 | tee -a "$LOG"
fi

if has ppl; then
    echo "== perplexity of the embedded default model on the cuda backend (bf16 and fp8 caches)" | tee -a "$LOG"
    timeout "$T_PPL" $PY - <<'EOF' 2>&1 | grep -E "perplexity|Error" | tee -a "$LOG" | tee "$OUT/perplexity.txt"
from tensorfold.engine.perplexity import perplexity
text = open("tests/data/heldout.txt", encoding="utf-8").read()
for kv in ("bf16", "fp8"):
    ppl, n = perplexity(None, text, backend="cuda", kv_cache=kv)
    print(f"default model, held-out text, cuda backend, kv cache {kv}: perplexity {ppl:.4f} over {n} tokens")
EOF
fi

if has decode; then
    echo "== decode and prompt, 2B" | tee -a "$LOG"
    timeout "$T_DECODE" $PY benchmarks/bench_decode.py --geometry 2b --root "$ROOT" --streams 1,8,32 \
        --prompts 512,4096 --steps 30 --profile "${PROFILE:-1}" ${DECODE_FLAGS:-} --out "$OUT/decode_2b.md" \
        >"$OUT/decode_2b.txt" 2>&1
    echo "exit code $?" >>"$OUT/decode_2b.txt"
    grep -vE "it/s\]|%\|" "$OUT/decode_2b.txt" | tail -60 | tee -a "$LOG"
fi

serve_bench() {  # $1 model dir, $2 label, $3 parallel, $4 concurrency list, $5 health wait seconds
    $PY -m tensorfold.cli serve "$1" --backend cuda --parallel "$3" --context 2048 --port "$PORT" \
        >"$OUT/serve_${2}_stdout.txt" 2>&1 &
    local SRV=$!
    for _ in $(seq 1 "$5"); do  # the server compiles its kernels and captures graphs before /health says ok
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
        sleep 1
    done
    grep -E "ready|Error|error" "$OUT/serve_${2}_stdout.txt" | head -5 | tee -a "$LOG"
    timeout "$T_SERVE" $PY benchmarks/bench_serve.py --url "http://127.0.0.1:$PORT" --input-len 256 --output-len 32 \
        --concurrency "$4" --num-prompts 32 --seed 0 --out "$OUT/serve_${2}.md" 2>&1 | tail -20 | tee -a "$LOG"
    kill -TERM "$SRV" 2>/dev/null
    wait "$SRV"
    echo "server exit code $?" | tee -a "$LOG"
}

if has serve; then
    echo "== serve, 2B" | tee -a "$LOG"
    M=$(ls -d "$ROOT"/*2b* 2>/dev/null | head -1)
    if [ -n "$M" ]; then
        serve_bench "$M" 2b 32 1,8,32 90
    else
        echo "no 2B model under $ROOT (the decode part writes it)" | tee -a "$LOG"
    fi
fi

if has big; then
    echo "== 27B: synth, load time, decode, serve" | tee -a "$LOG"
    if [ "${BIG_LOAD:-1}" = 1 ]; then  # the load split on its own (BIG_LOAD=0: the decode run's startup line only)
        timeout "${T_LOAD:-150}" $PY benchmarks/bench_decode.py --geometry 27b --root "$ROOT" --load-only \
            >"$OUT/load_27b.txt" 2>&1
        echo "exit code $?" >>"$OUT/load_27b.txt"
        grep -vE "it/s\]|%\|" "$OUT/load_27b.txt" | tail -12 | tee -a "$LOG"
    fi
    GEO_ARGS=""
    for g in ${BIG_GEOMS:-27b}; do GEO_ARGS="$GEO_ARGS --geometry $g"; done
    timeout "$T_BIG" $PY benchmarks/bench_decode.py $GEO_ARGS --root "$ROOT" --streams 1,8 --prompts 512 \
        --steps 20 ${BIG_FLAGS:-} --out "$OUT/decode_27b.md" >"$OUT/decode_27b.txt" 2>&1
    echo "exit code $?" >>"$OUT/decode_27b.txt"
    grep -vE "it/s\]|%\|" "$OUT/decode_27b.txt" | tail -30 | tee -a "$LOG"
    M=$(ls -d "$ROOT"/*27b* 2>/dev/null | head -1)
    if [ -n "$M" ] && has serve27; then
        echo "== serve, 27B" | tee -a "$LOG"
        serve_bench "$M" 27b 8 1,8 150
    fi
fi

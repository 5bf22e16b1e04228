#!/usr/bin/env bash
# One device session: the GPU test tier, the kernel benchmark, decode/prompt throughput at 2B, and the server
# benchmark against `tensorfold serve` on the cuda backend. Each part has its own time cap so that one slow part
# cannot take the others' results with it. Results go to $OUT (default benchmarks/results/gpu_session).
#
#   TF_COMMIT=$(git rev-parse --short HEAD) OUT=/some/dir bash benchmarks/gpu_session.sh
#
# On the lent H200 the image's numpy 2.5 breaks numba-cuda: install the carried numpy 2.4.6 wheel first
# (docs in ../shared/docs/gpu.md).
set -u
OUT=${OUT:-benchmarks/results/gpu_session}
mkdir -p "$OUT"
export NUMBA_ENABLE_CUDASIM=0 PYTHONUNBUFFERED=1
PY=${PY:-python3}
T_TESTS=${T_TESTS:-240}  # 130 s ran only 38 of the GPU tests on 2026-11-30
T_KERNELS=${T_KERNELS:-45}
T_DECODE=${T_DECODE:-120}
T_SERVE=${T_SERVE:-60}
T_PPL=${T_PPL:-60}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/session.log"

echo "== GPU tests" | tee -a "$OUT/session.log"
timeout "$T_TESTS" $PY -m pytest -m gpu -q -p no:cacheprovider -W ignore -ra \
    tests/kernels tests/runtime tests/engine 2>&1 | tail -40 | tee -a "$OUT/session.log"

echo "== perplexity of the embedded default model on the cuda backend (bf16 and fp8 caches)" | tee -a "$OUT/session.log"
timeout "$T_PPL" $PY - <<'EOF' 2>&1 | grep -E "perplexity|Error" | tee -a "$OUT/session.log" | tee "$OUT/perplexity.txt"
from tensorfold.engine.perplexity import perplexity
text = open("tests/data/heldout.txt", encoding="utf-8").read()
for kv in ("bf16", "fp8"):
    ppl, n = perplexity(None, text, backend="cuda", kv_cache=kv)
    print(f"default model, held-out text, cuda backend, kv cache {kv}: perplexity {ppl:.4f} over {n} tokens")
EOF

echo "== kernels (GEMV, sampling)" | tee -a "$OUT/session.log"
timeout "$T_KERNELS" $PY benchmarks/bench_kernels.py --no-b --only affine,sample --out "$OUT" 2>&1 | tail -40 | tee -a "$OUT/session.log"

echo "== decode and prompt, 2B" | tee -a "$OUT/session.log"
timeout "$T_DECODE" $PY benchmarks/bench_decode.py --geometry 2b --root /tmp/tfmodels --streams 1,8,32 \
    --prompts 512,4096 --steps 30 --out "$OUT/decode.md" 2>&1 | tail -30 | tee -a "$OUT/session.log"

echo "== serve, 2B" | tee -a "$OUT/session.log"
M=$(ls -d /tmp/tfmodels/*2b* 2>/dev/null | head -1)
if [ -n "$M" ]; then
    $PY -m tensorfold.cli serve "$M" --backend cuda --parallel 32 --context 2048 --port 8899 \
        >"$OUT/serve_stdout.txt" 2>&1 &
    SRV=$!
    for _ in $(seq 1 60); do  # the server compiles its kernels and captures graphs before /health says ok
        curl -sf http://127.0.0.1:8899/health >/dev/null 2>&1 && break
        sleep 1
    done
    timeout "$T_SERVE" $PY benchmarks/bench_serve.py --url http://127.0.0.1:8899 --input-len 256 --output-len 32 \
        --concurrency 1,8,32 --num-prompts 32 --seed 0 --out "$OUT/serve_2b.md" 2>&1 | tail -20 \
        | tee -a "$OUT/session.log"
    kill -TERM "$SRV" 2>/dev/null
    wait "$SRV"
    echo "server exit code $?" | tee -a "$OUT/session.log"
else
    echo "no 2B model under /tmp/tfmodels (the decode benchmark writes it)" | tee -a "$OUT/session.log"
fi

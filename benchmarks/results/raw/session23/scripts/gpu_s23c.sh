#!/usr/bin/env bash
# Session 23, call 3 (one GPU, the session's last ~450 s): the O-split chunked delta rule (the inter pass keeps
# V' = U - W S and the state update; gdn_chunk_out forms O = (e^c q) S_c + P V' for every chunk at once).
# 1. GPU tier, six pytest processes side by side (own kernel caches; nothing timed): the O-split form against the
#    unsplit pass bit for bit at 2B / 9B / 27B head counts (test_gpu_prompt), against the float64 recurrence
#    (test_gpu_b), the runtime's prompt paths that now take it (prefill of many prompts = many segments,
#    prompt vs step KL, reference), and session 22's last qgemv code (4035072), never run on the GPU.
# 2. bench_kernels_b chunked at 8,192 tokens, unsplit vs O-split, with fla's chunk_gated_delta_rule as the peer.
#    Prediction: the inter pass has 2 Dk/32 = 8 stages a chunk instead of 14, so about -40 % on it; the O pass is
#    parallel (16K blocks at 9B) and costs 5-15 % of the old inter time: chunked total 10-16 ms -> 7-11 ms.
# 3. 2B prompt 4,096 tokens, TENSORFOLD_CHUNK_OSPLIT=0 vs 1, if time is left.
. benchmarks/_dec.sh
out_dir s23c
t0=$SECONDS
t() {  # t NAME TIMEOUT pytest-args...: one pytest process with its own kernel cache
    local n=$1 s=$2; shift 2
    TENSORFOLD_CACHE_DIR=/tmp/tfkc_$n timeout "$s" python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
        --tb=short "$@" >"$R/$n.txt" 2>&1
    echo "== $n rc $?"; grep -h "passed\|failed\|rror" "$R/$n.txt" | tail -4
}
t prompt 200 tests/kernels/test_gpu_prompt.py &
t chunk 200 tests/kernels/test_gpu_b.py -k chunked &
t prefill 200 tests/runtime/test_gpu_prefill.py &
t runtime 200 tests/runtime/test_gpu_runtime.py -k "prompt_vs_step or vs_reference" &
t qgemv 200 tests/kernels/test_gpu_qgemv.py &
t glu 200 tests/kernels/test_gpu_glu.py &
wait; pack
echo "== tests done at $((SECONDS - t0)) s"
timeout 110 python3 benchmarks/bench_kernels_b.py --models 2B,9B,27B --only chunked,fla --out "$R/kernels_b.md" \
    >"$R/kernels_b.txt" 2>&1
echo "== bench rc $? at $((SECONDS - t0)) s"; grep -h "chunk" "$R/kernels_b.md"; pack
for v in 0 1; do
    left=$((405 - (SECONDS - t0)))
    [ "$left" -lt 40 ] && { echo "== prompt osplit=$v skipped ($left s left)"; continue; }
    TENSORFOLD_CHUNK_OSPLIT=$v timeout "$left" python3 benchmarks/bench_decode.py --geometry 2b --root /tmp/tfm \
        --streams 1 --steps 5 --prompts 4096 --out "$R/prompt_os$v.md" >"$R/prompt_os$v.txt" 2>&1
    echo "== prompt osplit=$v rc $?"; grep -h "prompt \|rror" "$R/prompt_os$v.txt" | head -3; pack
done

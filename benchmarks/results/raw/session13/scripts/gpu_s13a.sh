#!/usr/bin/env bash
# Session 13, call 1 (two GPUs), from a `git archive` of the commit.
# A: GPU tiers with programmatic dependent launch in the decode graphs: PDL graph == eager (test_gpu_pdl), the
#    window / tree graphs, graph replay alone vs batched, the fused GDN tier, the kernel cache across processes.
# B: decode with PDL (default) and without (TENSORFOLD_PDL=0): 2B (with a profile), 9B, 27B.
set -u
. "$(dirname "$0")/_tracks.sh"
OUT=${OUT:-/tmp/s13a}
CAP=${CAP:-560}
mkdir -p "$OUT/a" "$OUT/b"
track_a() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_a
    timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --tb=short -s tests/runtime/test_gpu_pdl.py \
        tests/runtime/test_gpu_graphs.py "tests/runtime/test_gpu_runtime.py::test_graph_replay_alone_vs_batched" \
        tests/kernels/test_gpu_fused.py tests/kernels/test_gpu_kcache.py >"$OUT/a/gpu_tests.txt" 2>&1
}
track_b() {
    export TENSORFOLD_CACHE_DIR=/tmp/tfkc_b
    for g in 2b 9b 27b; do
        for p in 1 0; do
            prof=""; [ "$g" = 2b ] && [ "$p" = 1 ] && prof="--profile 1"
            TENSORFOLD_PDL=$p timeout 150 python3 benchmarks/bench_decode.py --geometry $g --root /tmp/tfm_$g \
                --streams 1,8 --prompts 512 --steps 30 $prof --out "$OUT/b/decode_${g}_pdl$p.md" \
                >"$OUT/b/decode_${g}_pdl$p.txt" 2>&1
        done
    done
}
run_tracks s13a
grep -hE "loaded|decode |prompt " "$OUT"/b/*.txt; tail -n 5 "$OUT/a/gpu_tests.txt"

# Sourced by the two-GPU device scripts (gpu_pending.sh, gpu_call_s11*.sh, gpu_s12*.sh): after the script has
# defined track_a and track_b (shell functions; track_a runs on GPU 0, track_b on GPU 1), `run_tracks NAME` runs
# both side by side, each bounded by $CAP seconds, notes their exit codes in $OUT/{a,b}/track.txt and packs $OUT/a
# and $OUT/b (plus any extra paths given) into $OUT/NAME.tar.gz (the device returns few files). Variables the
# tracks need must be exported by the caller or named in TRACK_VARS.
# A `.commit` file beside the scripts' checkout (written when the snapshot is archived: `git rev-parse --short HEAD
# > .snap/.commit`) becomes TF_COMMIT, which bench_decode.py records (the device copy has no git metadata of its own).
if [ -z "${TF_COMMIT:-}" ] && [ -f "$(dirname "${BASH_SOURCE[0]}")/../.commit" ]; then
    export TF_COMMIT=$(cat "$(dirname "${BASH_SOURCE[0]}")/../.commit")
fi
run_tracks() {
    local name=$1; shift
    mkdir -p "$OUT/a" "$OUT/b"
    local vars="OUT=$OUT ${TRACK_VARS:-}"
    ( timeout "$CAP" bash -c "$(declare -f track_a); export CUDA_VISIBLE_DEVICES=0 $vars; track_a" ) &
    local A=$!
    ( timeout "$CAP" bash -c "$(declare -f track_b); export CUDA_VISIBLE_DEVICES=1 $vars; track_b" ) &
    local B=$!
    wait $A; echo "track A exit $?" >>"$OUT/a/track.txt"
    wait $B; echo "track B exit $?" >>"$OUT/b/track.txt"
    tar -czf "$OUT/$name.tar.gz" -C "$OUT" a b "$@"
}

#!/usr/bin/env bash
# Two gpu_session.sh tracks side by side on a two-GPU machine (device kind nvidia-h200-x2), each on its own GPU,
# results dir and server port; then both results packed into $OUT/tracks.tar.gz (the device returns few files).
#
#   OUT=/some/dir TRACK_A="PARTS=tests,decode,serve ..." TRACK_B="PARTS=big,serve27 ..." bash benchmarks/gpu_two_tracks.sh
#
# TRACK_A / TRACK_B are extra environment assignments (space separated) for each track. CAP (seconds, default 540)
# bounds the whole run; the tar is written even when a track is cut off.
set -u
OUT=${OUT:-benchmarks/results/gpu_two_tracks}
CAP=${CAP:-540}
mkdir -p "$OUT/a" "$OUT/b"
track() {  # $1 gpu, $2 dir, $3 port, $4 assignments (shell words, quotes allowed)
    local dir="$OUT/$2"
    ( eval "export $4"; export CUDA_VISIBLE_DEVICES=$1 OUT="$dir" PORT=$3 ROOT=/tmp/tfmodels_$2
      timeout "$CAP" bash benchmarks/gpu_session.sh >"$dir/track.txt" 2>&1 )
}
track 0 a 8899 "${TRACK_A:-}" &
A=$!
track 1 b 8898 "${TRACK_B:-}" &
B=$!
wait $A; echo "track A exit $?" | tee -a "$OUT/a/track.txt"
wait $B; echo "track B exit $?" | tee -a "$OUT/b/track.txt"
tar -czf "$OUT/tracks.tar.gz" -C "$OUT" a b
cat "$OUT/a/session.log" "$OUT/b/session.log" 2>/dev/null | tail -150

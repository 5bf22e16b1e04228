#!/usr/bin/env bash
# Prepared in session 34: decode at long context, never measured (every decode figure so far follows a 32-token
# prompt). Since session 33 attention reads q, cache rows and partials with coherent loads (no .nc), and its cost
# grows with the context. 9B, bf16 KV, streams 1 / 8 after 4,096-token prompts, and one stream after 16,384, with
# transformers + fla as the peer at the same context. Prediction: at 4,096 a step adds 4096 x 8 layers x 2 x 4 kv
# heads x 256 x 2 bytes = 134 MB (3 % of the 9B's 4.5 GB step) a stream: one stream about 360 tok/s; 8 streams
# read 1.07 GB more a step (5.27 -> 6.34 GB): about 1,700 tok/s if attention streams at the GEMVs' rate.
. benchmarks/_dec.sh
out_dir s35b
t0=$SECONDS
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import bench_decode as b; b._synth_dir('9b', '/tmp/tfm', print)" \
    > "$R/synth.txt" 2>&1
echo "== synth at $((SECONDS - t0)) s"
timeout 260 python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1,8 --prompts "" \
    --decode-prompt 4096 --steps 40 --peer --peer-streams 1 --out "$R/decode_9b_ctx4k.md" > "$R/decode_9b_ctx4k.txt" 2>&1
echo "== 4k rc $? at $((SECONDS - t0)) s"; grep -h "decode \|peer" "$R/decode_9b_ctx4k.txt" | head -6; pack
timeout $((570 - (SECONDS - t0))) python3 benchmarks/bench_decode.py --geometry 9b --root /tmp/tfm --streams 1 \
    --prompts "" --decode-prompt 16384 --steps 40 --out "$R/decode_9b_ctx16k.md" > "$R/decode_9b_ctx16k.txt" 2>&1
echo "== 16k rc $? at $((SECONDS - t0)) s"; grep -h "decode " "$R/decode_9b_ctx16k.txt" | head -3; pack
echo "== done at $((SECONDS - t0)) s"

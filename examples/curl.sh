#!/usr/bin/env bash
# tensorfold serve with curl: health, models, a chat reply, a streamed completion, tokenize, metrics.
#   tensorfold serve &            (or: tensorfold serve MODEL --api-key KEY, then TENSORFOLD_API_KEY=KEY ./curl.sh)
#   ./examples/curl.sh [URL]
set -euo pipefail
URL="${1:-${TENSORFOLD_URL:-http://127.0.0.1:8888}}"
AUTH=()
if [[ -n "${TENSORFOLD_API_KEY:-}" ]]; then AUTH=(-H "Authorization: Bearer ${TENSORFOLD_API_KEY}"); fi

echo "== health";  curl -sS "$URL/health"; echo
echo "== models";  curl -sS "${AUTH[@]}" "$URL/v1/models"; echo

echo "== chat"
curl -sS "${AUTH[@]}" "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "messages": [{"role": "user", "content": "Say hello in three words."}],
  "max_tokens": 16, "temperature": 0,
  "chat_template_kwargs": {"enable_thinking": false}
}'; echo

echo "== streamed completion (SSE)"
curl -sS -N "${AUTH[@]}" "$URL/v1/completions" -H 'Content-Type: application/json' -d '{
  "prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0.7, "seed": 7,
  "stream": true, "stream_options": {"include_usage": true}
}'

echo "== tokenize"
curl -sS "${AUTH[@]}" "$URL/tokenize" -H 'Content-Type: application/json' -d '{"prompt": "Hello world"}'; echo

echo "== an error: n = 2 is refused with a 400"
curl -sS "${AUTH[@]}" "$URL/v1/completions" -H 'Content-Type: application/json' -d '{"prompt": "x", "n": 2}'; echo

echo "== metrics (first lines)"
curl -sS "$URL/metrics" | grep -E '^vllm:(num_requests|generation_tokens_total|prompt_tokens_total)' || true

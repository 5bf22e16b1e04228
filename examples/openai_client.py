"""Talk to `tensorfold serve` with the official `openai` package: a chat reply, a streamed completion with
usage, and the engine block (timings, token_sha) that tensorfold adds to every response.

    tensorfold serve &                      # the embedded default model on http://127.0.0.1:8888
    python examples/openai_client.py        # or: --url http://host:port --api-key KEY
"""

from __future__ import annotations

import argparse
import os

import openai


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="chat and streaming against tensorfold serve")
    ap.add_argument("--url", default=os.environ.get("TENSORFOLD_URL", "http://127.0.0.1:8888"))
    ap.add_argument("--api-key", default=os.environ.get("TENSORFOLD_API_KEY", "none"))
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args(argv)

    client = openai.OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key=args.api_key)
    model = client.models.list().data[0].id
    print(f"model: {model}")

    # 1. a chat reply (greedy); thinking off where the template supports it
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "You answer briefly."},
                  {"role": "user", "content": "What is the capital of France?"}],
        max_tokens=args.max_tokens, temperature=0,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    msg = r.choices[0].message
    print(f"chat: {msg.content!r} (finish_reason {r.choices[0].finish_reason})")
    reasoning = (msg.model_extra or {}).get("reasoning_content")
    if reasoning:
        print(f"reasoning: {reasoning!r}")
    print(f"usage: {r.usage.prompt_tokens} prompt + {r.usage.completion_tokens} completion tokens")
    engine = (r.model_extra or {}).get("engine", {})
    print(f"engine: token_sha {engine.get('token_sha')}, timings {engine.get('timings')}")

    # 2. a streamed completion, seeded, with a stop string and the usage chunk at the end
    stream = client.completions.create(
        model=model, prompt="The river", max_tokens=args.max_tokens, temperature=0.8, seed=1234,
        stop=["\n\n"], stream=True, stream_options={"include_usage": True},
    )
    print("stream: ", end="", flush=True)
    for chunk in stream:
        if chunk.choices:
            print(chunk.choices[0].text, end="", flush=True)
        if chunk.usage:
            print(f"\n[usage: {chunk.usage.completion_tokens} tokens]")


if __name__ == "__main__":
    main()

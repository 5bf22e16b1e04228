"""Drive the engine from Python without a server: several prompts decoded together, tokens streamed as they come.

    python examples/engine_api.py                      # the embedded default model, cpu or cuda backend
    python examples/engine_api.py /path/to/mlx-model    # any Qwen3.5 checkpoint directory or hub id
"""

import sys

from tensorfold.engine import Engine
from tensorfold.sampling import SamplingParams

model = sys.argv[1] if len(sys.argv) > 1 else None
engine = Engine.from_model(model, parallel=3, context=1024)
print(engine.summary(), file=sys.stderr)

prompts = ["def fibonacci(n):\n", "import os\n\n\ndef list_files(path):\n", "class Stack:\n    def __init__(self):\n"]
texts = {}
for i, p in enumerate(prompts):
    # temperature 0 = greedy; with a seed, a sampled stream repeats exactly whatever else shares the batch
    params = SamplingParams(temperature=0.0 if i == 0 else 0.7, seed=i, max_tokens=48)
    rid = engine.add_request(engine.tokenizer.encode(p), params)
    texts[rid] = p

while engine.has_unfinished():
    for out in engine.step():
        texts[out.request_id] += out.text
        if out.finished:
            print(f"--- {out.request_id} ({out.finish_reason}, {out.completion_tokens} tokens)")
            print(texts[out.request_id])

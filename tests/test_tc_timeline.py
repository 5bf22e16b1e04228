"""benchmarks/tc_timeline.py: the stamps it adds to the first tensor-core GEMV's generated source (plan and
whole-share forms, one and several warps a block, the whole form with x's fragments made once a block) are each
assigned exactly once, in phase order, and the result is
valid Python; a source without the markers it needs is refused. Nothing runs on a GPU here."""

from __future__ import annotations

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import tc_timeline as TL  # noqa: E402
from tensorfold.kernels import affine as A  # noqa: E402


@pytest.mark.parametrize("nw,mt,u,whole,vs,wpre,xf", [(8, 2, 2, 0, 1, 0, 0), (8, 2, 8, 8, 1, 0, 0),
                                                      (16, 1, 2, 1, 1, 0, 0), (1, 2, 2, 0, 1, 0, 0),
                                                      (1, 1, 4, 1, 1, 0, 0), (8, 2, 2, 0, 2, 0, 0),
                                                      (16, 2, 4, 1, 1, 0, 0), (16, 2, 4, 1, 1, 2, 0),
                                                      (8, 2, 8, 8, 1, 4, 0), (16, 2, 4, 1, 1, 0, 1),
                                                      (4, 2, 8, 8, 1, 0, 1), (16, 2, 4, 1, 1, 2, 1)])
def test_stamps_placed_once_in_order(nw, mt, u, whole, vs, wpre, xf):
    src = A._gen_tc_source("k", 4, 64, 1, nw, mt, u, "bf16", True, 1, whole=whole, vs=vs, wpre=wpre, xf=bool(xf))
    out = TL.instrument(src, nw, bool(whole))
    compile(out, "<tl>", "exec")
    assert out.splitlines()[0].endswith(", tl):")
    lines = out.splitlines()
    pos = {}
    for k in ("tq0", "tq1", "tq2", "tq3", "tq6", "tq7", "tq4"):
        hits = [i for i, ln in enumerate(lines) if re.match(rf"\s+{k} = ", ln)]
        assert len(hits) == 1, (k, hits)
        pos[k] = hits[0]
    wait = next(i for i, ln in enumerate(lines) if ln.strip() == "pdl_wait()")
    assert pos["tq0"] < wait < pos["tq1"] <= pos["tq2"] < pos["tq3"] <= pos["tq6"] < pos["tq4"]
    assert pos["tq6"] <= pos["tq7"] < pos["tq4"]
    for j in range(10):
        assert f"tl[gw, {j}] = " in out


def test_refuses_source_without_markers():
    with pytest.raises(AssertionError, match="stamps"):
        TL.instrument("def k(W, S, B, x, y, R, c0, c1):\n    pass\n", 8, False)

"""Simulator tier for the cluster tail of the fused GDN kernels (``delta_rule`` ``gdn_fused_*_cl``, session 42).

On a cc >= 9.0 GPU ``launch_fused`` launches a head's column-slice blocks as one thread-block cluster: each block
keeps its slice of a row's o in shared memory, the cluster meets at a barrier, and every block sums the head's
squares from the cluster's shared memory and writes its own columns of the normed output. The simulator runs one
block at a time, so it can only run a cluster of one block: a head of 16 value columns (``Dv = SVS``), where the
barrier is ``syncthreads`` and every distributed read is the block's own. That runs the kernel's whole code path
(z / norm-weight prefetch, the per-row barriers, the norm arithmetic); the multi-block exchange itself is tested on
the GPU (``tests/kernels/test_gpu_fused.py``, Dv = 128: eight blocks a cluster).

Shapes as ``test_sim_fused`` but Dv 16 (Hk 1, Hv 2, Dk 16), fresh random inputs:
- the cluster kernels (``TENSORFOLD_GDN_CLUSTER=1``, opt-in) give ``gn``, ``o``, state, logs and raw-row log equal
  to the counter-tail kernels (``TENSORFOLD_GDN_CLUSTER=0``, the default) and the three-launch path bit for bit;
- ``gn`` against the float64 twins within ``test_sim_fused.TOL`` (2e-5 absolute + relative);
- a stream's rows alone equal the same rows beside another stream.
"""

from __future__ import annotations

import numpy as np
import pytest

import test_sim_fused as tsf
from tensorfold.kernels import delta_rule as dr


@pytest.fixture
def dv16(monkeypatch):
    """The sibling module's helpers at Dv = 16 (one block a head)."""
    dv = dr.SVS
    monkeypatch.setattr(tsf, "Dv", dv)
    monkeypatch.setattr(tsf, "C", 2 * tsf.KD + tsf.Hv * dv)
    monkeypatch.setattr(tsf, "Vd", tsf.Hv * dv)
    monkeypatch.delenv("TENSORFOLD_GDN_CLUSTER", raising=False)
    assert not dr.cluster_on(dv)  # opt-in until it has run on a GPU
    monkeypatch.setenv("TENSORFOLD_GDN_CLUSTER", "1")
    assert dr.cluster_on(dv) and not dr.cluster_on(40)
    return monkeypatch


def _both(mp, *args, **kw):
    cl = tsf._run_fused(*args, **kw)
    mp.setenv("TENSORFOLD_GDN_CLUSTER", "0")
    assert not dr.cluster_on(tsf.Dv)
    ct = tsf._run_fused(*args, **kw)
    mp.setenv("TENSORFOLD_GDN_CLUSTER", "1")
    return cl, ct


@pytest.mark.parametrize("act", ["silu", "sigmoid"])
def test_cluster_step_windows_equal_counter_unfused_reference(dv16, act):
    rng = np.random.default_rng(4231)
    p = tsf._model(rng, 3)
    u = tsf._u(rng, 4)
    segs = [(0, 3, 2, 1), (3, 0, -1, 1), (3, 1, 0, 1)]  # a committed 3-row window, padding, a one-row step
    parent = [-1, 0, 1, -1]
    cl, ct = _both(dv16, u, p, segs, parent, log=False, act=act)
    assert not np.isnan(cl["gn"]).any()
    tsf._check_equal_unfused(cl, ct, slice(0, 4))
    tsf._check_equal_unfused(cl, tsf._run_unfused(u, p, segs, parent, log=False, act=act), slice(0, 4))
    gn2, st2 = tsf._reference(u[:3], p, 2, [-1, 0, 1], act)
    np.testing.assert_allclose(cl["gn"][:3], gn2, **tsf.TOL)
    np.testing.assert_allclose(cl["state"][2], st2[-1], **tsf.TOL)
    gn0, _ = tsf._reference(u[3:4], p, 0, [-1], act)
    np.testing.assert_allclose(cl["gn"][3:4], gn0, **tsf.TOL)


def test_cluster_tree_logged_equals_counter_unfused_reference(dv16):
    rng = np.random.default_rng(4232)
    p = tsf._model(rng, 2)
    tree = [-1, 0, 0, 1, 2, -1, 5]
    u = tsf._u(rng, 9)
    segs = [(0, 7, 1, 0), (7, 2, 0, 0)]
    parent = tree + [-1, 7]
    cl, ct = _both(dv16, u, p, segs, parent, log=True)
    assert not np.isnan(cl["gn"]).any()
    tsf._check_equal_unfused(cl, ct, slice(0, 9))
    tsf._check_equal_unfused(cl, tsf._run_unfused(u, p, segs, parent, log=True), slice(0, 9))
    np.testing.assert_array_equal(cl["state"], p["state"])  # nothing committed
    gt, _ = tsf._reference(u[:7], p, 1, tree)
    np.testing.assert_allclose(cl["gn"][:7], gt, **tsf.TOL)


def test_cluster_stream_alone_equals_batched(dv16):
    rng = np.random.default_rng(4233)
    p = tsf._model(rng, 3)
    u = tsf._u(rng, 2)
    both = tsf._run_fused(u, p, [(0, 1, 2, 1), (1, 1, 0, 1)], [-1, -1], log=False)
    alone = tsf._run_fused(u[1:2], p, [(0, 1, 0, 1)], [-1], log=False)
    np.testing.assert_array_equal(both["gn"][1:2], alone["gn"])
    np.testing.assert_array_equal(both["state"][0], alone["state"][0])

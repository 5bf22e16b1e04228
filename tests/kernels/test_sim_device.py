"""Simulator tier for the simulator itself as ``tensorfold.kernels._device`` patches it (pooled worker threads, a
condition-variable block barrier, the shared-array lookup keyed by the caller's file and line): the CUDA semantics
every other simulator test relies on. Expected values are computed here in numpy, not by the simulator.
"""

import numpy as np
import pytest
from numba import cuda

from tensorfold.kernels import _device as D

pytestmark = pytest.mark.skipif(not D.IS_SIM, reason="checks the CUDA simulator")


def test_barrier_with_early_returns_and_per_block_shared_memory():
    """Threads that return before a barrier do not count (numba's rule); every block sees its own shared values."""

    @cuda.jit
    def kern(a):
        t = cuda.threadIdx.x
        if t >= 20:
            return
        sh = cuda.shared.array(64, np.float32)
        sh[t] = t + 100 * cuda.blockIdx.x
        cuda.syncthreads()
        a[cuda.blockIdx.x, t] = sh[19 - t]
        cuda.syncthreads()

    rng = np.random.default_rng()
    blocks = int(rng.integers(2, 5))
    a = np.full((blocks, 20), np.nan, np.float32)
    kern[blocks, 64](a)
    want = np.array([[19 - t + 100 * b for t in range(20)] for b in range(blocks)], np.float32)
    assert np.array_equal(a, want)


def test_exception_aborts_block_and_next_launch_runs():
    @cuda.jit
    def boom(a, bad):
        t = cuda.threadIdx.x
        cuda.syncthreads()
        if t == bad and cuda.blockIdx.x == 1:
            raise ValueError("bad thread")
        cuda.syncthreads()
        a[cuda.blockIdx.x * cuda.blockDim.x + t] = 1

    a = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match=r"tid=\[5, 0, 0\] ctaid=\[1, 0, 0\]"):
        boom[2, 32](a, 5)
    b = np.zeros(64, np.float32)
    boom[2, 32](b, 99)  # no thread raises: the reused workers run the whole launch
    assert b.all()


def test_block_votes_and_2d_blocks():
    @cuda.jit
    def votes(a):
        t = cuda.threadIdx.x + cuda.threadIdx.y * cuda.blockDim.x
        c = cuda.syncthreads_count(t % 3 == 0)
        o = cuda.syncthreads_or(t == 7)
        n = cuda.syncthreads_and(t < 47)
        a[t] = c * 100 + o * 10 + n

    a = np.zeros(48, np.int64)
    votes[1, (8, 6)](a)
    assert (a == 16 * 100 + 10 + 0).all(), a


def test_warp_sum_per_warp_and_block():
    @cuda.jit
    def kern(a, x):
        i = cuda.threadIdx.x
        a[cuda.blockIdx.x, i] = D.warp_sum(x[cuda.blockIdx.x, i])

    rng = np.random.default_rng()
    x = rng.integers(-1000, 1000, (3, 64)).astype(np.float32)  # integers: exact in any order
    a = np.full((3, 64), np.nan, np.float32)
    kern[3, 64](a, x)
    want = np.repeat(x.reshape(3, 2, 32).sum(-1), 32, axis=1)
    assert np.array_equal(a, want)


def test_quad_sum_order():
    """``quad_sum``: every lane of a quad gets (v0 + v1) + (v2 + v3), the shfl_xor 1-then-2 order. Values where the
    float32 association matters (1e8 and small terms), so another order gives other bits."""

    @cuda.jit
    def kern(a, x):
        i = cuda.threadIdx.x
        a[i] = D.quad_sum(x[i])

    rng = np.random.default_rng()
    x = (rng.standard_normal(64) * np.tile(np.float32([1e8, 1.0, -1e8, 1.0]), 16)).astype(np.float32)
    a = np.full(64, np.nan, np.float32)
    kern[1, 64](a, x)
    q = x.reshape(16, 4)
    want = np.repeat((q[:, 0] + q[:, 1]) + (q[:, 2] + q[:, 3]), 4)
    assert np.array_equal(a.view(np.uint32), want.view(np.uint32))

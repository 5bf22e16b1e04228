"""Two of numba's front-end passes, made faster for big generated kernels (host side; compile time only).

Why: a cold start spends its time in numba compiling, and the big generated GEMV kernels (about 500 basic blocks,
thousands of variables, some 250 of them assigned more than once) spend most of theirs in two pure-Python passes
whose cost grows with blocks x variables:

- ``analysis.compute_live_map`` finds two least fixed points by sweeping every block until nothing changes: the
  definitions reaching each block (forward) and the variables live at each block's entry (backward, but swept in
  block order, so a use moves back one block a sweep: as many sweeps as the longest chain of blocks).
- ``ssa._run_ssa`` fixes one variable at a time, and for each rewrites every statement of every block twice.

Measured locally (session 34, 2 cores, ``compile_ptx`` for sm_90 of the 27B gate+up SwiGLU GEMV,
``qgemv3_..._glu_sw_xz_e2_q_va``): 53.1 s with numba's passes, 15.6 s with these, the same PTX (only numba's
per-process name counters differ).

What:

- :func:`compute_live_map` computes the same two least fixed points with worklists over bit sets (a Python int, a
  bit a variable). A block is revisited only when an input of it grew, and the backward problem starts from the
  last block. Both problems are monotone unions, so the least fixed point does not depend on the visiting order:
  the same map, set for set.
- The SSA rewrite hands numba's own per-block rewrite only the blocks that mention the variable being fixed, in the
  same order; a block that does not mention it is copied as it is (numba's handlers return such statements
  unchanged, so its own rewrite would produce the same copy).

Checked by ``tests/kernels/test_fastlive.py``: the live map against numba's function on random graphs, and kernels
compiled to PTX with and without these (same text after the name counters are normalised).

:func:`install` swaps them into ``numba.cuda.core.analysis`` / ``ir_utils`` / ``ssa`` when the installed
numba-cuda has that layout (otherwise it changes nothing); ``_device`` installs them outside the simulator;
``TENSORFOLD_FAST_LIVENESS=0`` leaves numba as it is.
"""

from __future__ import annotations

import inspect
import os
from collections import defaultdict, deque

__all__ = ["compute_live_map", "install", "installed"]

_STATE = {"installed": False, "original": None}


def compute_live_map(cfg, blocks, var_use_map, var_def_map):
    """Variables live at the entry of each block: the same map as numba's ``analysis.compute_live_map``.

    Definitions reaching block b (including b's own uses and definitions, as numba counts them):
    ``reach[b] = use[b] | def[b] | union(reach[p] for p a predecessor of b that is in var_def_map)``.
    Live at entry: ``live[b] = use[b] | union((live[s] & reach[b]) - def[b] for s a successor of b)``.
    Sets are Python ints here (a bit a variable): a union of two thousand-variable sets is then a few dozen word
    operations instead of a hash per element.
    """
    index: dict = {}

    def bits(names) -> int:
        v = 0
        for nm in names:
            i = index.get(nm)
            if i is None:
                i = index[nm] = len(index)
            v |= 1 << i
        return v

    use = {b: bits(var_use_map[b]) for b in var_use_map}
    dfn = {b: bits(var_def_map[b]) for b in var_def_map}

    reach = defaultdict(int)
    work = deque(var_def_map)
    queued = set(work)
    while work:
        b = work.popleft()
        queued.discard(b)
        rb = reach[b] | dfn[b] | use[b]
        reach[b] = rb
        for s, _ in cfg.successors(b):
            rs = reach[s]
            if rb & ~rs:
                reach[s] = rs | rb
                if s in var_def_map and s not in queued:
                    work.append(s)
                    queued.add(s)

    live = {b: use[b] for b in blocks.keys()}
    work = deque(reversed(list(live)))
    queued = set(work)
    while work:
        b = work.popleft()
        queued.discard(b)
        lb = live[b]
        for p, _ in cfg.predecessors(b):
            lp = live[p]
            add = lb & reach[p] & ~dfn[p] & ~lp
            if add:
                live[p] = lp | add
                if p not in queued:
                    work.append(p)
                    queued.add(p)

    names = list(index)
    out = {}
    for b, v in live.items():
        s = set()
        while v:
            low = v & -v
            s.add(names[low.bit_length() - 1])
            v ^= low
        out[b] = s
    return out


_NAMES: dict = {}  # id(block) -> (block, names it mentions), during one SSA reconstruction


def _block_names(blk):
    got = _NAMES.get(id(blk))
    if got is not None and got[0] is blk:
        return got[1]
    names = frozenset(v.name for stmt in blk.body for v in stmt.list_vars())
    _NAMES[id(blk)] = (blk, names)
    return names


def _make_ssa_rewrite(orig_rewrite, handlers, ir):
    """numba's SSA reconstruction fixes one variable at a time, and each time rewrites every statement of every
    block through a handler (twice: fresh names, then uses). Its handlers leave a statement that does not mention
    the variable as it is, so a block that does not mention it comes out as a copy. This rewrite copies those blocks
    without walking their statements and hands the others to numba's own rewrite, in the same order."""

    def rewrite(blocks, states, handler):
        varname = states.get("varname")
        if varname is None or type(handler) not in handlers:
            return orig_rewrite(blocks, states, handler)
        newblocks = {}
        for label, blk in blocks.items():
            if varname in _block_names(blk):
                newblocks.update(orig_rewrite({label: blk}, states, handler))
            else:
                nb = ir.Block(scope=blk.scope, loc=blk.loc)
                nb.body = list(blk.body)
                _NAMES[id(nb)] = (nb, _block_names(blk))
                newblocks[label] = nb
        return newblocks

    return rewrite


def _make_run_ssa(orig_run):
    def run_ssa(blocks):  # the names cache lives for one reconstruction (it holds that function's blocks)
        _NAMES.clear()
        try:
            return orig_run(blocks)
        finally:
            _NAMES.clear()

    return run_ssa


def _params(fn) -> tuple:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def installed() -> bool:
    return _STATE["installed"]


def install() -> bool:
    """Use :func:`compute_live_map` and the SSA rewrite in numba-cuda's front end; False where it cannot (another
    layout) or where ``TENSORFOLD_FAST_LIVENESS=0``."""
    if _STATE["installed"]:
        return True
    if os.environ.get("TENSORFOLD_FAST_LIVENESS", "1").strip() == "0":
        return False
    try:
        from numba.cuda.core import analysis, ir, ir_utils, ssa
    except ImportError:
        return False
    orig = getattr(analysis, "compute_live_map", None)
    if orig is None or getattr(ir_utils, "compute_live_map", None) is not orig:
        return False
    names = ("_run_block_rewrite", "_run_ssa", "_FreshVarHandler", "_FixSSAVars")
    if not all(hasattr(ssa, n) for n in names) or not hasattr(ir, "Block"):
        return False
    # the functions replaced or wrapped must still take the arguments they took when this was written (numba-cuda
    # 0.30.4); a release that changes them is left alone rather than guessed at
    if (_params(orig) != ("cfg", "blocks", "var_use_map", "var_def_map")
            or _params(ssa._run_block_rewrite) != ("blocks", "states", "handler")
            or _params(ssa._run_ssa) != ("blocks",)):
        return False
    _STATE["original"] = (orig, ssa._run_block_rewrite, ssa._run_ssa)
    analysis.compute_live_map = compute_live_map
    ir_utils.compute_live_map = compute_live_map
    ssa._run_block_rewrite = _make_ssa_rewrite(ssa._run_block_rewrite, (ssa._FreshVarHandler, ssa._FixSSAVars), ir)
    ssa._run_ssa = _make_run_ssa(ssa._run_ssa)
    _STATE["installed"] = True
    return True


def uninstall() -> None:
    """Put numba's own functions back (tests compare the two)."""
    if not _STATE["installed"]:
        return
    from numba.cuda.core import analysis, ir_utils, ssa

    live, rewrite, run = _STATE["original"]
    analysis.compute_live_map = ir_utils.compute_live_map = live
    ssa._run_block_rewrite, ssa._run_ssa = rewrite, run
    _STATE["installed"] = False

"""Source-level help for the generated kernels (``qgemv``, ``affine``'s tensor-core GEMV, ``gemm``).

``single_assignment(src)``: the generators unroll loops into long straight-line runs that reuse a few temporary
names (``d0``, ``qv``, ``pa0_0``, ...) dozens of times. numba rebuilds SSA form over the whole function, and for
such names that took about half of a kernel's compile time (8.5 s of a qgemv kernel). This pass renames, inside
each straight-line run of simple statements, every assignment of a qualifying name to a fresh name, so numba's SSA
pass has nothing left to do for them. The arithmetic is untouched (the SASS of qgemv's kernels is identical).

A name qualifies when every occurrence of it in the function lies in such runs and, in each run where it occurs,
its first occurrence is a store of a plain assignment (so no value flows into a run, out of it, or around a loop).
An augmented assignment of a qualifying name becomes ``new = old <op> (value)``.
"""

from __future__ import annotations

import ast

__all__ = ["single_assignment"]

_SIMPLE = (ast.Assign, ast.AugAssign, ast.Expr, ast.AnnAssign, ast.Pass)


def _runs(fn: ast.FunctionDef):
    """Every maximal run of consecutive simple statements in every statement list of ``fn``, and every other
    statement's header expressions (tests, iterators, targets of for)."""
    runs, headers = [], []

    def visit_list(stmts):
        cur = []
        for i, s in enumerate(stmts):
            if isinstance(s, _SIMPLE):
                cur.append((stmts, i))
                continue
            if cur:
                runs.append(cur)
                cur = []
            for field in ("test", "iter", "target", "value", "exc", "msg", "context_expr"):
                v = getattr(s, field, None)
                if isinstance(v, ast.AST):
                    headers.append(v)
            for item in getattr(s, "items", []) or []:
                headers.append(item)
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(s, field, None)
                if isinstance(sub, list) and sub:
                    visit_list(sub)
            for h in getattr(s, "handlers", []) or []:
                visit_list(h.body)
        if cur:
            runs.append(cur)

    visit_list(fn.body)
    return runs, headers


def _names(node):
    return [n for n in ast.walk(node) if isinstance(n, ast.Name)]


def _events(stmt):
    """(name, 'load' | 'store' | 'aug') in evaluation order for one simple statement."""
    ev = []
    if isinstance(stmt, ast.Assign):
        ev += [(n.id, "load") for n in _names(stmt.value)]
        for t in stmt.targets:
            for n in _names(t):
                ev.append((n.id, "store" if isinstance(n.ctx, ast.Store) else "load"))
    elif isinstance(stmt, ast.AugAssign):
        ev += [(n.id, "load") for n in _names(stmt.value)]
        if isinstance(stmt.target, ast.Name):
            ev.append((stmt.target.id, "aug"))
        else:
            ev += [(n.id, "load") for n in _names(stmt.target)]
    else:
        ev += [(n.id, "other") for n in _names(stmt)]
    return ev


def single_assignment(src: str) -> str:
    """``src`` (one function definition, as the generators write it) with its straight-line temporaries renamed;
    see the module docstring. Returns ``src`` unchanged if it holds no function."""
    tree = ast.parse(src)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not fns:
        return src
    fn = fns[0]
    runs_at, headers = _runs(fn)
    stmt_runs = [[lst[i] for lst, i in run] for run in runs_at]
    bad = {a.arg for a in fn.args.args}
    for h in headers:
        bad.update(n.id for n in _names(h))
    seen_in_run = {}
    for ri, run in enumerate(stmt_runs):
        first = {}
        for s in run:
            for name, kind in _events(s):
                first.setdefault(name, kind)
                seen_in_run.setdefault(name, set()).add(ri)
        for name, kind in first.items():
            if kind != "store":
                bad.add(name)
    # a name stored by a non-plain-assignment statement (AnnAssign, Expr walrus, ...) never qualifies
    for run in stmt_runs:
        for s in run:
            if not isinstance(s, (ast.Assign, ast.AugAssign)):
                bad.update(n.id for n in _names(s))
    # every occurrence must be in a run: count occurrences outside runs
    in_runs = set()
    for run in stmt_runs:
        for s in run:
            in_runs.update(id(n) for n in _names(s))
    for n in _names(fn):
        if id(n) not in in_runs:
            bad.add(n.id)
    ok = set(seen_in_run) - bad
    if not ok:
        return src
    serial = [0]

    class _Ren(ast.NodeTransformer):
        def __init__(self, cur):
            self.cur = cur

        def visit_Name(self, node):
            if node.id in ok and isinstance(node.ctx, ast.Load) and node.id in self.cur:
                return ast.copy_location(ast.Name(id=self.cur[node.id], ctx=ast.Load()), node)
            return node

    def fresh(name):
        serial[0] += 1
        return f"{name}__{serial[0]}"

    for run in runs_at:
        cur: dict = {}
        for lst, i in run:
            s = lst[i]
            ren = _Ren(cur)
            if isinstance(s, ast.Assign):
                s.value = ren.visit(s.value)
                new_targets = []
                for t in s.targets:
                    if isinstance(t, ast.Name) and t.id in ok:
                        cur[t.id] = fresh(t.id)
                        t = ast.copy_location(ast.Name(id=cur[t.id], ctx=ast.Store()), t)
                    elif isinstance(t, ast.Tuple):
                        elts = []
                        for e in t.elts:
                            if isinstance(e, ast.Name) and e.id in ok:
                                cur[e.id] = fresh(e.id)
                                e = ast.copy_location(ast.Name(id=cur[e.id], ctx=ast.Store()), e)
                            else:
                                e = ren.visit(e)
                            elts.append(e)
                        t = ast.copy_location(ast.Tuple(elts=elts, ctx=ast.Store()), t)
                    else:
                        t = ren.visit(t)
                    new_targets.append(t)
                s.targets = new_targets
            elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id in ok:
                old = cur[s.target.id]
                val = ren.visit(s.value)
                cur[s.target.id] = fresh(s.target.id)
                lst[i] = ast.copy_location(
                    ast.Assign(targets=[ast.Name(id=cur[s.target.id], ctx=ast.Store())],
                               value=ast.BinOp(left=ast.Name(id=old, ctx=ast.Load()), op=s.op, right=val)), s)
            else:
                ren.visit(s)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"

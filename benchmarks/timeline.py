"""Where a replayed decode step's wall time goes, kernel by kernel, from measured start / end times on the GPU.

``bench_decode.py --timeline 1,8`` records every kernel of a few decode steps (graph replays, run-ahead on, as the
engine runs them) through torch's profiler (CUPTI kernel records: start and end stamps of each kernel inside the
graphs, PDL overlap included), then :func:`analyse` turns them into a table. The per-kernel profile
(``--profile``) times each launch replayed alone; it cannot say what a kernel costs *in the chain*, where PDL lets
a kernel start before its predecessor ends. This does:

- a kernel's **exposed** time is how far it pushes the end of the timeline: ``max(0, end - max(start, E))`` with
  ``E`` the latest end of the kernels that started before it. Summed over a step, exposed time plus the idle gaps
  is the step's wall time, so removing a kernel can save at most its exposed time (plus the gap before it).
- a **gap** is GPU time with no kernel running: ``max(0, start - E)`` (a launch that could not start earlier: graph
  boundaries, the host, dependencies without PDL).
- a step starts at its embedding gather (the first kernel of every step graph); the time between one step's last
  kernel and the next step's first is reported as the step boundary. Copies and sets on the stream (the
  metadata written before a step, the ids copied back after it) are items too, named ``copy: ...``; those
  between two graphs count in the earlier step.

The functions here are pure Python (no GPU, no torch) so that the analysis is tested on the CPU
(``tests/test_timeline.py``); :func:`kernels_from_trace` reads a Chrome trace that torch's profiler exported.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field


@dataclass
class Row:
    name: str
    count: int = 0
    busy: float = 0.0  # sum of (end - start)
    exposed: float = 0.0  # sum of the kernel's own extension of the timeline
    gap: float = 0.0  # idle time just before the kernel started


@dataclass
class Report:
    steps: int
    wall: float  # mean first start -> last end of a step (the trace's time unit)
    boundary: float  # mean idle time between one step's last end and the next step's first start
    rows: list = field(default_factory=list)  # [Row], most exposed first, per step (divided by steps)


def short_name(name: str) -> str:
    """The kernel's function name from what the profiler reports for a numba kernel: an Itanium-mangled
    (``_ZN6cudapy...E...``) or demangled (``cudapy::a::b::name[abi:...](args)``) name, with numba's
    ``$N`` suffix (mangled as ``_24N``) removed."""
    n = name
    if n.startswith("_ZN"):  # nested name: <len><id>... E
        i, parts = 3, []
        while i < len(n) and n[i].isdigit():
            j = i
            while j < len(n) and n[j].isdigit():
                j += 1
            k = int(n[i:j])
            parts.append(n[j:j + k])
            i = j + k
        n = parts[-1] if parts else n
    n = n.split("(")[0].split("[")[0].split("::")[-1]
    return re.sub(r"(_24|\$)\d+$", "", n)


GPU_CATS = {"kernel": "", "gpu_memcpy": "copy: ", "gpu_memset": "set: "}


def kernels_from_trace(path: str):
    """[(name, start, end)] in µs of the GPU work in a Chrome trace (torch.profiler's export), by start: kernels
    (names shortened by :func:`short_name`) and the stream's copies and sets (named ``copy: <kind>``, e.g. the
    metadata written before each step graph), which occupy the stream between graphs like kernels do."""
    with open(path) as f:
        data = json.load(f)
    evs = data["traceEvents"] if isinstance(data, dict) else data
    out = []
    for e in evs:
        cat = e.get("cat")
        if e.get("ph") != "X" or cat not in GPU_CATS:
            continue
        name = short_name(e["name"]) if cat == "kernel" else GPU_CATS[cat] + str(e["name"])
        out.append((name, float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))))
    out.sort(key=lambda k: (k[1], k[2]))
    return out


def split_steps(kernels, first="embed"):
    """Cut a start-ordered kernel list into steps, each starting at a kernel whose name starts with ``first``.
    Kernels before the first such kernel are dropped (a partial step)."""
    steps, cur = [], None
    for k in kernels:
        if k[0].startswith(first):
            if cur:
                steps.append(cur)
            cur = [k]
        elif cur is not None:
            cur.append(k)
    if cur:
        steps.append(cur)
    return steps


def analyse(kernels, first="embed", drop_last=True) -> Report:
    """Per-kernel-name busy, exposed and gap time per step (see the module docstring). ``drop_last``: the last step
    may be cut by the end of the recording, so it is left out when there are others."""
    steps = split_steps(kernels, first)
    if drop_last and len(steps) > 1:
        steps = steps[:-1]
    if not steps:
        raise ValueError(f"timeline: no step found (no kernel named {first}*)")
    rows: dict = {}
    wall = 0.0
    bounds = []
    prev_end = None
    for st in steps:
        if prev_end is not None:
            bounds.append(max(0.0, st[0][1] - prev_end))
        E = st[0][1]
        for name, s, e in st:
            r = rows.setdefault(name, Row(name))
            r.count += 1
            r.busy += e - s
            r.gap += max(0.0, s - E)
            r.exposed += max(0.0, e - max(s, E))
            E = max(E, e)
        wall += E - st[0][1]
        prev_end = E
    n = len(steps)
    out = []
    for r in rows.values():
        out.append(Row(r.name, r.count // n if r.count % n == 0 else r.count / n, r.busy / n, r.exposed / n,
                       r.gap / n))
    out.sort(key=lambda r: -(r.exposed + r.gap))
    return Report(n, wall / n, sum(bounds) / len(bounds) if bounds else 0.0, out)


def format_report(rep: Report, unit="us") -> str:
    """A text table: per kernel name, launches a step, busy, exposed and gap time a step, exposed share."""
    lines = [f"  timeline: {rep.steps} steps, wall {rep.wall:.1f} {unit} a step (first kernel start -> last end), "
             f"step boundary {rep.boundary:.1f} {unit}"]
    tot_e = sum(r.exposed for r in rep.rows)
    tot_g = sum(r.gap for r in rep.rows)
    tot_b = sum(r.busy for r in rep.rows)
    lines.append(f"  sums a step: busy {tot_b:.1f}, exposed {tot_e:.1f}, gaps {tot_g:.1f} "
                 f"(exposed + gaps = wall: {tot_e + tot_g:.1f})")
    lines.append(f"    {'kernel':<58} {'n':>5} {'busy':>9} {'exposed':>9} {'gap':>8} {'exp %':>6}")
    for r in rep.rows:
        share = 100.0 * r.exposed / rep.wall if rep.wall else 0.0
        lines.append(f"    {r.name[:58]:<58} {r.count:>5} {r.busy:9.1f} {r.exposed:9.1f} {r.gap:8.1f} {share:6.1f}")
    return "\n".join(lines)

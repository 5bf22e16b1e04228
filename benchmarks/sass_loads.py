"""Offline SASS look at a decode-GEMV variant's main loop: where ptxas puts the weight loads relative to their first
use (session 18: qgemv's epilogue kernel at depth 1 was slower because its loads were placed close to their uses).

Needs ``ptxas`` (CUDA toolkit) and ``nvdisasm``: ``NVDISASM=/path/to/nvdisasm``. The device machine has one in
/usr/local/cuda/bin; a device call ``cp /usr/local/cuda/bin/nvdisasm $OUT/`` brings it here (session 18 kept it in
the git-ignored ``.tools/``). The kernels compile here from PTX for sm_90 with a stand-in device, no GPU.

    python benchmarks/sass_loads.py "qgemv:24576,4096" "qgemv:24576,4096,glu" "qgemv:24576,4096,glu,d2"

A spec is ``qgemv:OUT,IN[,glu][,dN][,uN][,pbN][,nt2][,noc][,sw][,xh]`` (the default plan of that shape, 4-bit g64, with the
given depth / groups an iteration / x-preparation batch / two n-tiles / the arithmetic left out / swept layout). ``SASS_LAUNCH_BOUNDS=THREADS,BLOCKS`` compiles
with numba's launch bounds (what ``qgemv.get_kernel`` sets for one-n-tile kernels: ``128,3``). For the loop that holds the HMMAs, it prints the instruction count, then for the global loads (LDG): how
many, and the distance in instructions from each load to the first instruction that reads its result (wrapping
around the loop): minimum, mean, and how many are used within 100 instructions; and ptxas's register count.

Checked against session 18's H200 timings (9B gate + up, one row): the shipped kernel (29.3 µs) has no load used
within 100 instructions (minimum 141); the SwiGLU-epilogue kernel at depth 1 (36.1 µs) has 23 (minimum 16); at
depth 2 (30.4 µs) none again (minimum 130); the reverted live-row x preparation (+7 %) has 2 (minimum 49).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")


def _fake_device():
    import numba.cuda.dispatcher as disp

    class _Dev:
        compute_capability = (9, 0)

    disp.get_current_device = lambda: _Dev()


def _cubin(pyfunc, sig) -> str:
    from numba import cuda

    lbk = os.environ.get("SASS_LAUNCH_BOUNDS", "")  # "THREADS,BLOCKS": numba's launch_bounds (what get_kernel sets)
    kw = {"launch_bounds": tuple(int(v) for v in lbk.split(","))} if lbk else {}
    ptx, _ = cuda.compile_ptx(pyfunc, sig, cc=(9, 0), **kw)
    ptx = re.sub(r"^\.version \d+\.\d+", ".version 9.0", ptx, flags=re.M)
    lb = os.environ.get("SASS_BOUNDS", "")  # "THREADS,BLOCKS": .maxntid / .minnctapersm on the entry (an experiment)
    if lb:
        nthr, nblk = (int(v) for v in lb.split(","))
        ptx = re.sub(r"(\.entry\s+[^(]+\([^)]*\))", lambda m: m.group(1) + f"\n.maxntid {nthr}, 1, 1\n.minnctapersm {nblk}",
                     ptx, count=1, flags=re.S)
    d = tempfile.mkdtemp()
    src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
    with open(src, "w") as fh:
        fh.write(ptx)
    r = subprocess.run(["ptxas", "-arch=sm_90", "-v", src, "-o", out], check=True, capture_output=True, text=True)
    m = re.search(r"Used (\d+) registers", r.stdout + r.stderr)
    _cubin.regs = int(m.group(1)) if m else None
    sp = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stdout + r.stderr)
    _cubin.spills = (int(sp.group(1)), int(sp.group(2))) if sp else None
    return out


def _sass(cubin: str) -> list[tuple[int, str]]:
    """(address, instruction) in order; a branch's label target is rewritten as its address (``BRA 0x...``)."""
    nvd = os.environ.get("NVDISASM", "nvdisasm")
    txt = subprocess.run([nvd, "-c", cubin], capture_output=True, text=True, check=True).stdout
    out, labels, pending = [], {}, []
    for ln in txt.splitlines():
        lm = re.match(r"\s*(\.L_x_\d+):", ln)
        if lm:
            pending.append(lm.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", ln)
        if m:
            a = int(m.group(1), 16)
            for lb in pending:
                labels[lb] = a
            pending = []
            out.append((a, m.group(2).strip()))
    return [(a, re.sub(r"`\((\.L_x_\d+)\)", lambda mm: hex(labels.get(mm.group(1), 0)), s)) for a, s in out]


def _regs(operand: str) -> set[str]:
    """registers an operand names (R8.64 / R8 covers R8 and R9 for 64-bit loads via the caller)"""
    return set(re.findall(r"\bR(\d+)\b", operand))


def loop_report(ins: list[tuple[int, str]]) -> dict:
    addr = [a for a, _ in ins]
    loops = []
    for i, (a, s) in enumerate(ins):
        m = re.search(r"BRA\s+0x([0-9a-f]+)", s)
        if m:
            t = int(m.group(1), 16)
            if t < a and t in addr:
                loops.append((addr.index(t), i))
    best = None
    for j0, j1 in loops:
        body = ins[j0:j1 + 1]
        nh = sum("HMMA" in s for _, s in body)
        if nh and (best is None or nh > best[2]):
            best = (j0, j1, nh)
    if best is None:
        return {}
    j0, j1, nh = best
    body = [s for _, s in ins[j0:j1 + 1]]
    n = len(body)
    dists = []
    for k, s in enumerate(body):
        if not re.match(r"(@!?P\d\s+)?LDG", s):
            continue
        ops = s.split(None, 1)[1] if not s.startswith("@") else s.split(None, 2)[2]
        dst = ops.split(",")[0].strip()
        m = re.match(r"R(\d+)", dst)
        if not m:
            continue
        width = 4 if ".128" in s else (2 if ".64" in s else 1)
        regs = {str(int(m.group(1)) + w) for w in range(width)}
        for step in range(1, n + 1):
            t = body[(k + step) % n]
            parts = t.split(None, 1)
            if len(parts) < 2:
                continue
            srcs = parts[1].split(",")[1:] if not t.startswith("@") else t.split(None, 2)[2].split(",")[1:]
            if any(_regs(x) & regs for x in srcs):
                dists.append(step)
                break
    return {"instructions": n, "hmma": nh, "ldg": len(dists), "min": min(dists) if dists else None,
            "mean": sum(dists) / len(dists) if dists else None, "within100": sum(d < 100 for d in dists)}


def _spec(spec: str):
    from tensorfold.kernels import qgemv as Q

    kind, rest = spec.split(":", 1)
    parts = rest.split(",")
    out, inp = int(parts[0]), int(parts[1])
    flags = parts[2:]
    if kind != "qgemv":
        raise SystemExit(f"unknown kind {kind!r}")
    u = next((int(f[1:]) for f in flags if f.startswith("u")), None)
    p = Q.plan(out, inp, 4, 64, u=u)
    depth = next((int(f[1:]) for f in flags if f.startswith("d")), p.depth)
    pb = next((int(f[2:]) for f in flags if f.startswith("pb")), 0)
    nt = 2 if "nt2" in flags else 1
    f = Q.get_pyfunc(4, 64, nt, p.nw, p.mt, p.cg, p.u, depth, pb=pb, glu="glu" in flags, noc="noc" in flags,
                     sw="sw" in flags, xh=2 if "xz" in flags else int("xh" in flags))
    return f, Q._SIG


def main(argv):
    _fake_device()
    from tensorfold.kernels import _device

    _device.pdl_target(True)
    for spec in argv:
        f, sig = _spec(spec)
        r = loop_report(_sass(_cubin(f, sig)))
        r["registers"] = _cubin.regs
        r["spill_bytes"] = _cubin.spills
        print(f"{spec:36s} {r}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Summaries of the Nsight Compute output of ``benchmarks/results/raw/session15/scripts/gpu_s15b.sh`` (run here, on
its returned files).

    python benchmarks/ncu_report.py stalls STALLS.csv          # per kernel: time, DRAM bytes, issue, top stalls
    python benchmarks/ncu_report.py sass SASS.csv[.gz] [N]     # per-instruction stall samples: totals, by
                                                               # execution count (prologue / loop / tail), top N

``stalls``: the ``--page raw`` CSV with the ``smsp__average_warps_issue_stalled_*_per_issue_active`` ratios.
``sass``: the ``--page source --print-source sass`` CSV of one kernel. Instructions with the same execution count
form one region of the kernel (run once a warp, once a tile, ...), which is how the session 15 notes split qgemv3's
samples into its x preparation, its loop and its split-K completion.
"""

from __future__ import annotations

import csv
import gzip
import io
import sys


def _lines(path: str) -> list[str]:
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return f.read().splitlines()


def _csv(lines: list[str]) -> list[list[str]]:
    return list(csv.reader(io.StringIO("\n".join(lines))))


def stalls(path: str) -> None:
    rows = _csv([ln for ln in _lines(path) if ln.startswith('"')])  # ncu's own lines start otherwise
    hdr = rows[0]
    kn = hdr.index("Kernel Name")
    st = [i for i, h in enumerate(hdr) if "issue_stalled" in h]
    val = {h: i for i, h in enumerate(hdr)}

    def f(r, name):
        v = r[val[name]] if name in val else ""
        try:
            return float(v.replace(",", ""))
        except ValueError:
            return float("nan")

    for r in rows[2:]:
        if r[0] == "ID":
            continue
        t = f(r, "gpu__time_duration.sum")
        mb = f(r, "dram__bytes_read.sum")
        top = sorted(((f(r, hdr[i]), hdr[i].replace("smsp__average_warps_issue_stalled_", "")
                       .replace("_per_issue_active.ratio", "")) for i in st), reverse=True)[:5]
        print(f"{r[kn][:48]:48s} {t * 1e3:8.1f} us  {mb:8.2f} MB  "
              f"issue {f(r, 'smsp__issue_active.avg.pct_of_peak_sustained_active'):5.1f} %  "
              + ", ".join(f"{n} {v:.2f}" for v, n in top))


def sass(path: str, top: int = 25) -> None:
    rows = _csv(_lines(path)[1:])  # the first line names the kernel
    hdr, data = rows[0], rows[1:]
    ci = {h: i for i, h in enumerate(hdr)}
    keys = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    samp = "Warp Stall Sampling (All Samples)"
    ex = "Instructions Executed"
    tot = sum(int(r[ci[samp]] or 0) for r in data)
    print(f"{len(data)} instructions, {tot} samples")
    agg = {k: sum(int(r[ci[k]] or 0) for r in data) for k in keys}
    print("by reason:", ", ".join(f"{k[6:]} {v}" for k, v in sorted(agg.items(), key=lambda kv: -kv[1])[:8]))
    reg: dict = {}
    for r in data:
        e = int(r[ci[ex]] or 0)
        a = reg.setdefault(e, [0, 0])
        a[0] += int(r[ci[samp]] or 0)
        a[1] += 1
    print("by execution count (count: samples, instructions):")
    for e, (s, n) in sorted(reg.items(), key=lambda kv: -kv[1][0])[:8]:
        print(f"  {e:8d}: {s:6d} samples ({100 * s / max(tot, 1):4.1f} %), {n} instructions")
    print(f"top {top}:")
    for r in sorted(data, key=lambda r: -int(r[ci[samp]] or 0))[:top]:
        s = int(r[ci[samp]] or 0)
        det = sorted(((int(r[ci[k]] or 0), k[6:]) for k in keys), reverse=True)[:2]
        print(f"  {s:5d} {100 * s / max(tot, 1):5.1f} % ex {r[ci[ex]]:>7} {r[1].strip()[:58]:58s} "
              + " ".join(f"{k} {v}" for v, k in det if v))


def main(argv=None) -> int:
    a = sys.argv[1:] if argv is None else argv
    if len(a) >= 2 and a[0] == "stalls":
        stalls(a[1])
    elif len(a) >= 2 and a[0] == "sass":
        sass(a[1], int(a[2]) if len(a) > 2 else 25)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

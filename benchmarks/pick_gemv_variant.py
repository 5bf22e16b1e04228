"""Pick the decode GEMV variant from a device session: ``pick_gemv_variant.py OUTDIR GPU_TEST_LOG``.

Reads the kernel benchmark's JSON rows in OUTDIR (rows tagged ``{"gemv_shape", "variant", "R"}``) and the GPU test
log; drops every variant named in a FAILED/ERROR line of the log (and all of them when the log shows no passes);
prints the variant with the smallest sum over shapes of (1-row time + half the 8-row time), or ``default``."""

import glob
import json
import re
import sys


def main(outdir: str, log: str) -> str:
    text = open(log, encoding="utf-8", errors="replace").read()
    if not re.search(r"\d+ passed", text):
        return "default"
    ids = re.findall(r"(?:FAILED|ERROR) \S*\[([^\]]*)\]", text)
    bad = {tok for i in ids for tok in re.split(r"[-\s]", i)}
    if re.search(r"(?:FAILED|ERROR) \S*::\w+(?:\s|$)", text):  # a failure without a variant id: trust none
        return "default"
    rows = []
    for f in glob.glob(f"{outdir}/*.json"):
        try:
            data = json.load(open(f))
        except Exception:
            continue
        rows += [r for r in (data.get("rows", data) if isinstance(data, dict) else data)
                 if isinstance(r, dict) and r.get("tag") and "us" in r]
    score, shapes = {}, {}
    for r in rows:
        t = r["tag"]
        if t["variant"] in bad or t["R"] not in (1, 8):
            continue
        w = 1.0 if t["R"] == 1 else 0.5
        score[t["variant"]] = score.get(t["variant"], 0.0) + w * r["us"]
        shapes.setdefault(t["variant"], set()).add((t["gemv_shape"], t["R"]))
    full = max((len(s) for s in shapes.values()), default=0)
    cands = [(v, s) for v, s in score.items() if len(shapes[v]) == full]
    if not cands:
        return "default"
    return min(cands, key=lambda c: c[1])[0]


if __name__ == "__main__":
    print(main(sys.argv[1], sys.argv[2]))

"""``runtime.arena.Arena.upload``: the chunked, pinned-staged upload puts every byte where the plan says, for
chunk sizes that split tensors anywhere (256 B, an odd 1000 B, 4 KiB) or hold the whole model. Oracle: the
checkpoint's own arrays (fused linears = their sources' rows concatenated in order; vectors as float32)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfold.runtime.arena import Arena, _host_parts


@pytest.mark.parametrize("chunk", [256, 1000, 4096, 1 << 24])
def test_upload_bytes_match_checkpoint(tiny_ckpt, chunk):
    ck = tiny_ckpt
    a = Arena.upload(ck.tensors, ck.config, progress=False, chunk_bytes=chunk)
    assert set(a.timings) == {"plan", "read", "wait", "total"}
    seen = set()
    for key, e in a._lin.items():
        members = [m for m, _, _ in a.parts.get(key, [(key, 0, 0)])]
        seen.update(members)
        if e["kind"] == "affine":
            for part, attr in (("W", "packed"), ("S", "scales"), ("B", "biases")):
                want = np.concatenate([np.asarray(getattr(ck.tensors[m], attr)) for m in members])
                assert np.array_equal(e[part].copy_to_host(), want), (key, part)
        else:
            want = np.concatenate([np.asarray(ck.tensors[m].data) for m in members])
            assert np.array_equal(e["W16"].copy_to_host(), want), key
    for key, v in a._vec.items():
        seen.add(key)
        assert np.array_equal(v.copy_to_host(), _host_parts(ck.tensors[key])[1]["V"]), key
    assert seen == set(ck.tensors)

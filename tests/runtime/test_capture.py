"""``runtime.glue.capture_graph`` (the one place decode and prompt graphs are captured) against a stand-in for
cuda.core's stream and graph builder: the launches go to the builder between begin and end, the completed graph is
uploaded on the same stream, and a launch that raises ends the capture before the error propagates."""

from __future__ import annotations

import pytest

from tensorfold.runtime.glue import capture_graph


class _Graph:
    def __init__(self, log):
        self.log = log

    def upload(self, stream):
        self.log.append(("upload", stream))


class _Builder:
    def __init__(self, log):
        self.log = log

    def begin_building(self):
        self.log.append("begin")

    def end_building(self):
        self.log.append("end")
        return self

    def complete(self):
        self.log.append("complete")
        return _Graph(self.log)


class _Stream:
    def __init__(self):
        self.log = []

    def create_graph_builder(self):
        return _Builder(self.log)


def test_capture_graph_order_and_upload():
    st = _Stream()
    g = capture_graph(st, lambda b: st.log.append(("launch", isinstance(b, _Builder))))
    assert st.log == ["begin", ("launch", True), "end", "complete", ("upload", st)]
    assert isinstance(g, _Graph)


def test_capture_graph_error_ends_capture():
    st = _Stream()

    def bad(_b):
        raise RuntimeError("launch failed")

    with pytest.raises(RuntimeError, match="launch failed"):
        capture_graph(st, bad)
    assert st.log == ["begin", "end"]

"""Detokenizer: streamed text equals an independent one-shot oracle; partial stop strings and split UTF-8
characters are held back; the matched stop string is cut."""

import numpy as np
import pytest

from tensorfold.engine.detokenizer import Detokenizer, held_suffix_len


def byte_decode(ids):
    return bytes(ids).decode("utf-8", errors="replace")


def oracle(text, stops):
    """(expected text, matched) for a whole stream: cut at the leftmost stop string."""
    cut = [(text.find(s), s) for s in stops if s in text]
    if not cut:
        return text, None
    i, s = min(cut)
    return text[:i], s


def stream(det, ids):
    deltas = []
    for t in ids:
        d = det.add(t)
        deltas.append(d)
        if det.stopped:
            break
    tail = det.flush()
    return deltas, tail


def test_held_suffix_len():
    assert held_suffix_len("abc", ["cde"]) == 1
    assert held_suffix_len("abcd", ["cdx", "bcdy"]) == 3
    assert held_suffix_len("abc", ["xyz"]) == 0
    assert held_suffix_len("ab", ["ab"]) == 0  # a whole match is not a *proper* prefix


def test_utf8_never_split():
    text = "héllo wörld 漢字 🎉 ok"
    ids = list(text.encode())
    det = Detokenizer(byte_decode)
    deltas, tail = stream(det, ids)
    assert "".join(deltas) + tail == text
    assert all("\ufffd" not in d for d in deltas)
    # the 4-byte emoji: nothing comes out until its last byte
    start = text.encode().index("🎉".encode())
    assert deltas[start:start + 3] == ["", "", ""] and deltas[start + 3].startswith("🎉")


def test_partial_stop_is_held_then_released_or_cut():
    det = Detokenizer(byte_decode, stop=["STOP"])
    out = [det.add(t) for t in b"abST"]
    assert "".join(out) == "ab"  # "ST" could start "STOP"
    assert det.add(ord("x")) == "STx"  # no longer a prefix: released
    out = [det.add(t) for t in b"yST"]
    assert "".join(out) == "y"
    assert det.add(ord("O")) == "" and det.add(ord("P")) == ""
    assert det.stopped and det.stop_str == "STOP" and det.text == "abSTxy"
    assert det.add(ord("z")) == "" and det.flush() == ""


def test_flush_releases_held_prefix():
    det = Detokenizer(byte_decode, stop=["</end>"])
    assert "".join(det.add(t) for t in b"done </e") == "done "
    assert det.flush() == "</e" and not det.stopped


def test_stop_inside_multibyte_and_unicode_stops():
    det = Detokenizer(byte_decode, stop=["字"])
    deltas, tail = stream(det, list("漢字x".encode()))
    assert "".join(deltas) + tail == "漢" and det.stop_str == "字"


def test_random_streams_match_oracle():
    rng = np.random.default_rng(1234)
    alphabet = list("abcXY é字\n")
    for trial in range(300):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(0, 30))))
        nstop = int(rng.integers(0, 3))
        stops = ["".join(rng.choice(alphabet, size=int(rng.integers(1, 4)))) for _ in range(nstop)]
        det = Detokenizer(byte_decode, stop=stops)
        deltas, tail = stream(det, list(text.encode()))
        want, matched = oracle(text, stops)
        got = "".join(deltas) + tail
        assert got == want, (text, stops)
        assert det.stopped == (matched is not None)
        assert all("\ufffd" not in d for d in deltas)
        # never emitted anything that is not a prefix of the final answer
        acc = ""
        for d in deltas:
            acc += d
            assert want.startswith(acc)


def test_accepts_ints_lists_and_arrays():
    a, b, c = Detokenizer(byte_decode), Detokenizer(byte_decode), Detokenizer(byte_decode)
    ids = list("añb".encode())
    assert a.add(np.array(ids)) == b.add(ids) == "".join(c.add(np.int64(t)) for t in ids) == "añb"


def test_bad_stop_strings():
    with pytest.raises(ValueError, match="stop"):
        Detokenizer(byte_decode, stop=[""])


"""Per-request incremental detokenization with stop strings.

`Detokenizer.add(token_ids) -> str` returns the text that is safe to show now:

* never half a character: byte-level BPE tokens can end inside a UTF-8 sequence; such text is held until the
  character completes (the prefix/read-offset method of vLLM and TGI: decode a short window of recent tokens
  twice and emit the difference, holding while the window ends in U+FFFD);
* never the start of a stop string: the longest suffix of the pending text that is a prefix of some stop string
  is held back until it either completes the stop string or stops matching;
* never a stop string: at the first (leftmost) match the text before it is emitted, the match and everything
  after it are dropped, and `stopped` becomes True (finish_reason "stop"; `stop_str` names the string).

`flush() -> str` ends the stream without a match: it releases the held-back text (a partial stop string, or an
incomplete character, which then decodes to U+FFFD as the tokenizer renders it).

The decoding uses `tensorfold.tokenizer.IncrementalDecoder` for a `tensorfold.tokenizer.Tokenizer` (byte tables, no
re-decoding); any other object with `decode(ids) -> str`, or a bare decode function, goes through `OffsetDecoder`
(the offsets method above, implemented here).
"""

from __future__ import annotations

import numbers
from typing import Callable, Iterable, Sequence

__all__ = ["Detokenizer", "OffsetDecoder", "held_suffix_len"]

_REPLACEMENT = "\ufffd"


def held_suffix_len(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `stops` (0 if none)."""
    best = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:n]):
                best = n
                break
    return best


class OffsetDecoder:
    """Incremental text from a `decode(ids) -> str` function, never splitting a character."""

    def __init__(self, decode: Callable[[list[int]], str]):
        self._decode = decode
        self.ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # tokens whose text has been emitted

    def add(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        prefix_text = self._decode(self.ids[self._prefix:self._read]) if self._read > self._prefix else ""
        new_text = self._decode(self.ids[self._prefix:])
        if len(new_text) > len(prefix_text) and not new_text.endswith(_REPLACEMENT):
            delta = new_text[len(prefix_text):]
            self._prefix = self._read
            self._read = len(self.ids)
            return delta
        return ""

    def flush(self) -> str:
        """Whatever is still held (an incomplete character decodes as the tokenizer renders it)."""
        if self._read >= len(self.ids):
            return ""
        prefix_text = self._decode(self.ids[self._prefix:self._read]) if self._read > self._prefix else ""
        new_text = self._decode(self.ids[self._prefix:])
        self._prefix = self._read = len(self.ids)
        return new_text[len(prefix_text):]


class _PushAdapter:
    """`tensorfold.tokenizer.IncrementalDecoder` (push / flush) seen through the add / flush interface."""

    def __init__(self, dec):
        self._dec = dec

    def add(self, token_id: int) -> str:
        return self._dec.push(token_id)

    def flush(self) -> str:
        return self._dec.flush()


def _make_decoder(tokenizer, skip_special: bool):
    """An object with add(id) -> str and flush() -> str for this tokenizer."""
    if callable(tokenizer):  # a bare decode function
        return OffsetDecoder(tokenizer)
    try:
        from tensorfold.tokenizer import IncrementalDecoder, Tokenizer
    except ImportError:  # pragma: no cover - the tokenizer module is part of the package
        IncrementalDecoder = Tokenizer = None
    if Tokenizer is not None and isinstance(tokenizer, Tokenizer):
        return _PushAdapter(IncrementalDecoder(tokenizer, skip_special=skip_special))
    return OffsetDecoder(tokenizer.decode)


class Detokenizer:
    """Streams one request's text; see the module docstring.

    tokenizer: a `tensorfold.tokenizer.Tokenizer`, any object with `decode(ids) -> str`, or a decode function.
    stop: stop strings (empty strings are refused).
    skip_special: leave special tokens (e.g. <|im_end|>) out of the text (tensorfold Tokenizers only).
    """

    def __init__(self, tokenizer, stop: Iterable[str] = (), skip_special: bool = True):
        self.stop = tuple(stop)
        if any((not isinstance(s, str)) or s == "" for s in self.stop):
            raise ValueError(f"stop strings must be non-empty strings, got {self.stop!r}")
        self._dec = _make_decoder(tokenizer, skip_special)
        self._pending = ""  # decoded but not yet emitted (could start a stop string)
        self.text = ""  # everything emitted so far
        self.stopped = False
        self.stop_str: str | None = None

    def add(self, token_ids) -> str:
        """Feed tokens (an int or a list); returns the newly safe text. After a stop match, returns ''."""
        if self.stopped:
            return ""
        if isinstance(token_ids, numbers.Integral):
            token_ids = [token_ids]
        for t in token_ids:
            self._pending += self._dec.add(int(t))
            if self.stop and self._match():
                break
        return self._release()

    def _match(self) -> bool:
        """Cut the pending text at the leftmost stop string, if any."""
        best = None
        for s in self.stop:
            i = self._pending.find(s)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        if best is None:
            return False
        self._pending = self._pending[: best[0]]
        self.stopped = True
        self.stop_str = best[1]
        return True

    def _release(self) -> str:
        if self.stopped:
            out, self._pending = self._pending, ""
        else:
            keep = held_suffix_len(self._pending, self.stop) if self.stop else 0
            cut = len(self._pending) - keep
            out, self._pending = self._pending[:cut], self._pending[cut:]
        self.text += out
        return out

    def flush(self) -> str:
        """End of stream without a stop match: release everything still held (checked for a stop first)."""
        if self.stopped:
            return ""
        self._pending += self._dec.flush()
        if self.stop:
            self._match()
        out, self._pending = self._pending, ""
        self.text += out
        return out

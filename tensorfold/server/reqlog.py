"""The opt-in request log (`--request-log FILE`): one JSON object a line.

Each line is written with a single `os.write` on an `O_APPEND` descriptor while holding a lock, so lines from
concurrent requests (and from other processes appending to the same file) never interleave.
"""

from __future__ import annotations

import json
import os
import threading
import time


class RequestLog:
    def __init__(self, path: str):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        rec = {"time": round(time.time(), 6), **record}
        data = (json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            if self._fd < 0:
                return
            n = os.write(self._fd, data)
            while n < len(data):  # regular files take the whole line; this only guards odd targets
                data = data[n:]
                n = os.write(self._fd, data)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

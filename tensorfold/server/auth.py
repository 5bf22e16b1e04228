"""API keys for `tensorfold serve`: `--api-key`, `TENSORFOLD_API_KEY` and `--api-key-file`.

Keys are kept only as sha256 digests and a presented key is compared against every digest with
`hmac.compare_digest` (no early exit). The key file holds one key a line (blank lines and `#` comments skipped)
and is refused when its group or other users can read it. `reload()` (SIGHUP) re-reads the file; if the new
file is unreadable, has bad permissions or is empty, the old keys stay and the problem is logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import stat

log = logging.getLogger("tensorfold.server")


class KeyFileError(ValueError):
    """The key file cannot be used (missing, readable by others, empty)."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def read_key_file(path: str) -> list[str]:
    try:
        st = os.stat(path)
    except OSError as e:
        raise KeyFileError(f"api key file {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"api key file {path} is not a regular file")
    if st.st_mode & 0o077:
        raise KeyFileError(f"api key file {path} is readable by group or other users "
                           f"(mode {stat.S_IMODE(st.st_mode):04o}); run: chmod 600 {path}")
    with open(path, encoding="utf-8") as f:
        keys = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    if not keys:
        raise KeyFileError(f"api key file {path} holds no keys")
    return keys


class KeyStore:
    def __init__(self, keys=(), key_file: str | None = None):
        self._static = [k for k in keys if k]
        self.key_file = key_file
        file_keys = read_key_file(key_file) if key_file else []
        self._digests = [_digest(k) for k in self._static + file_keys]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def reload(self) -> bool:
        """Re-read the key file; returns False (keeping the old keys) when it cannot be used."""
        if not self.key_file:
            return True
        try:
            file_keys = read_key_file(self.key_file)
        except (KeyFileError, OSError, UnicodeDecodeError) as e:
            log.error("api key file not reloaded, keeping the previous keys: %s", e)
            return False
        self._digests = [_digest(k) for k in self._static + file_keys]
        log.info("api keys reloaded from %s (%d keys)", self.key_file, len(self._digests))
        return True

    def check(self, presented: str | None) -> bool:
        if not self._digests:
            return True
        if not presented:
            return False
        d = _digest(presented)
        ok = False
        for ref in self._digests:
            ok |= hmac.compare_digest(d, ref)
        return ok

    @staticmethod
    def from_headers(headers) -> str | None:
        auth = headers.get("Authorization")
        if auth:
            scheme, _, token = auth.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        x = headers.get("x-api-key")
        return x.strip() if x else None

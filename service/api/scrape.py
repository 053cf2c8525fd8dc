"""The scrape token of ``GET /metrics``: who may read which tenant did what (``service/api/ops.py``)."""

from __future__ import annotations

import hashlib
import hmac
import os
import threading

from litestar.exceptions import NotAuthorizedException

from ..errors import ServiceConfigError

__all__ = ["ScrapeToken"]


class ScrapeToken:
    """The scrape token's hash, from its file (read again when the file changes: a rotated Secret); the token
    itself is never kept. A file that is set but cannot be read, or holds less than 16 characters, stops the
    service at start with a sentence; later, the last good token holds until the file is right again."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._digest: bytes | None = None
        if path:
            self._read()

    def _read(self) -> bytes | None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            with self._lock:
                if stamp != self._stamp:
                    with open(self.path, "rb") as f:
                        token = f.read(4096).strip()
                    if len(token) < 16:
                        if self._digest is not None:  # a file half-written, or emptied: the last good one holds
                            return self._digest
                        raise ServiceConfigError(f"the scrape token in metrics_token_file ({self.path}) is shorter "
                                                 "than 16 characters: put a long random one there")
                    self._digest, self._stamp = hashlib.sha256(token).digest(), stamp
                return self._digest
        except OSError as e:
            if self._digest is not None:  # the last good token holds while the file is swapped
                return self._digest
            raise ServiceConfigError(f"metrics_token_file {self.path} cannot be read ({e.strerror or e}): create it "
                                     "with the scrape token alone in it, or leave metrics_token_file empty") from None

    def per_tenant(self, authorization: str) -> bool:
        """True for the scrape token, False for no token; NotAuthorizedException for any other."""
        scheme, _sep, given = authorization.partition(" ")
        if not authorization:
            return False
        digest = self._read() if self.path else None
        if scheme.lower() == "bearer" and digest is not None and given.strip():
            if hmac.compare_digest(hashlib.sha256(given.strip().encode()).digest(), digest):
                return True
        why = ("this is not the service's scrape token" if digest is not None else
               "the service has no scrape token (metrics_token_file)")
        raise NotAuthorizedException(f"{why}: scrape with `Authorization: Bearer <the token in metrics_token_file>`, "
                                     "or with none for the metrics summed over tenants",
                                     headers={"WWW-Authenticate": 'Bearer realm="flower-metrics"'})

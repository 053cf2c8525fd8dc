"""Files several processes and concurrent hooks touch: atomic writes, a lock, content-addressed spills."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes, *, private: bool = False, durable: bool = False) -> Path:
    """Write through a temp file beside `path`, then rename: readers and crashes never see half a file.

    The temp name is random and created exclusively, never through a symlink: hooks of one tool
    call run concurrently, and a temp file left behind (or planted, say a 0644 one or a link to
    elsewhere) is never reused. `private` makes the file 0600 (answers a person typed, tokens);
    otherwise the umask decides. `durable` fsyncs before the rename, for state whose loss costs a
    whole run. The rename replaces a symlink at `path` itself, never what it points to.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600 if private else 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def locked(path: str | Path) -> Iterator[None]:
    """An exclusive lock on `<path>.lock`, so read-modify-write cycles of two processes never interleave."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def spill_file(directory: str | Path, text: str) -> Path:
    """`text` stored once under `<directory>/<sha256[:16]>.txt`; an existing file already holds it."""
    data = text.encode("utf-8", "surrogatepass")
    name = os.path.join(directory, hashlib.sha256(data).hexdigest()[:16] + ".txt")
    if not os.path.exists(name):  # a store load asks this for every long result: kept off pathlib
        write_atomic(name, data)
    return Path(name)


class SpillFolder:
    """``spill_file`` for many texts at once: the folder is listed once, not stat-ed per text.

    A resume spills thousands of old results, nearly all already on disk from the last
    resume; one listing answers for all of them. Names are ``spill_file``'s.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = os.fspath(directory)
        self._names: set[str] | None = None

    def put(self, text: str) -> str:
        """The path holding ``text`` (written if missing), as a string."""
        data = text.encode("utf-8", "surrogatepass")
        name = hashlib.sha256(data).hexdigest()[:16] + ".txt"
        if self._names is None:
            try:
                self._names = set(os.listdir(self.directory))
            except FileNotFoundError:
                self._names = set()
        path = os.path.join(self.directory, name)
        if name not in self._names:
            write_atomic(path, data)
            self._names.add(name)
        return path

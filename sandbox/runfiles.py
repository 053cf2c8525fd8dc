"""Reading and writing under a run's folder as if the run were hostile — because it may be.

Everything a run can write is attacker-controlled: a name may be a symlink to another tenant's secrets,
a FIFO that blocks a reader forever, ``/dev/zero``, a hard link, a sparse 10 GB file. So the service never
opens a path under a run folder by name: it walks from a directory fd it opened itself, one component at
a time with ``O_NOFOLLOW``, opens the last one ``O_NONBLOCK`` (a FIFO cannot block), and keeps only
regular files with one link, read up to a cap. Writes go only where the run cannot write at all (the
mailbox, read-only inside the sandbox), and even there through an unguessable temp name created with
``O_EXCL``, renamed in place relative to the same directory fd.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import RunFileError

__all__ = ["RunFileError", "open_dir", "read_file", "read_json", "list_files", "write_file", "open_file", "copy_out",
           "file_size", "MAX_JSON"]

MAX_JSON = 1024 * 1024  # exit.json, a question, manifest.json: small documents
MAX_SCAN = 10_000  # folder entries looked at by list_files
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _parts(rel: str | Path) -> list[str]:
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or any(p in ("..", ".", "") for p in parts):
        raise RunFileError(errno.EINVAL, f"{rel} is not a plain relative path")
    return list(parts)


@contextmanager
def open_dir(root: str | Path, rel: str | Path | None = None) -> Iterator[int]:
    """A directory fd of ``root`` (opened by the caller's own path: it must be a folder the run cannot replace),
    then of each component of ``rel`` below it, none of them a symlink."""
    fd = os.open(root, _DIR)
    try:
        for part in _parts(rel) if rel else []:
            try:
                nfd = os.open(part, _DIR, dir_fd=fd)
            except OSError as e:
                where = Path(root) / (rel or "")
                raise RunFileError(e.errno, f"{where} is not a folder ({os.strerror(e.errno or 0)})") from None
            os.close(fd)
            fd = nfd
        yield fd
    finally:
        os.close(fd)


def _open_regular(dir_fd: int, name: str, where: Path) -> int:
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunFileError(e.errno, f"{where} is a symlink: not followed") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "has several links" if stat.S_ISREG(st.st_mode) else "is not a regular file"
        raise RunFileError(errno.EINVAL, f"{where} {what}: not read")
    os.set_blocking(fd, True)
    return fd


@contextmanager
def open_file(root: str | Path, rel: str | Path) -> Iterator[int]:
    """An fd of the regular file ``root/rel`` (see the module doc); FileNotFoundError when it is not there."""
    *dirs, name = _parts(rel)
    with open_dir(root, Path(*dirs) if dirs else None) as dfd:
        fd = _open_regular(dfd, name, Path(root) / rel)
        try:
            yield fd
        finally:
            os.close(fd)


def file_size(root: str | Path, rel: str | Path) -> int | None:
    """Size of the regular file ``root/rel``; None when it is missing or not a plain file."""
    try:
        with open_file(root, rel) as fd:
            return os.fstat(fd).st_size
    except OSError:
        return None


def read_file(root: str | Path, rel: str | Path, *, limit: int = MAX_JSON, offset: int = 0) -> bytes:
    """At most ``limit`` bytes of ``root/rel`` from ``offset``; RunFileError when the file is larger than
    ``limit`` and ``offset`` is 0 (a whole-document read), FileNotFoundError when it is missing."""
    with open_file(root, rel) as fd:
        size = os.fstat(fd).st_size
        if offset == 0 and size > limit:
            raise RunFileError(errno.EFBIG, f"{Path(root) / rel} is {size} bytes, over the {limit}-byte cap: not read")
        return os.pread(fd, limit, offset)


def read_json(root: str | Path, rel: str | Path, *, limit: int = MAX_JSON) -> object | None:
    """The JSON document ``root/rel``; None when it is missing, unreadable, oversized or not JSON."""
    try:
        doc: object = json.loads(read_file(root, rel, limit=limit))
        return doc
    except (OSError, ValueError, RecursionError):
        return None


def list_files(root: str | Path, rel: str | Path, *, suffix: str = "", most: int = 1000) -> list[str]:
    """Names of the regular files in folder ``root/rel`` (sorted, at most ``most``; dot-files skipped)."""
    try:
        with open_dir(root, rel) as dfd:
            names = []
            with os.scandir(dfd) as it:
                for seen, entry in enumerate(it):
                    if seen >= MAX_SCAN:  # a run that fills the folder costs a bounded scan
                        break
                    if entry.name.startswith(".") or not entry.name.endswith(suffix):
                        continue
                    if entry.is_file(follow_symlinks=False):
                        names.append(entry.name)
            return sorted(names)[:most]
    except OSError:
        return []


def write_file(root: str | Path, rel: str | Path, data: bytes, *, mode: int = 0o600,
               owner: tuple[int, int] | None = None) -> None:
    """Write ``root/rel`` whole (temp + rename relative to one directory fd; the temp name is unguessable)."""
    *dirs, name = _parts(rel)
    with open_dir(root, Path(*dirs) if dirs else None) as dfd:
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                os.fchmod(f.fileno(), mode)
                if owner is not None:
                    os.fchown(f.fileno(), *owner)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise


def copy_out(root: str | Path, rel: str | Path, dest: str | Path, *, limit: int) -> int:
    """Copy the regular file ``root/rel`` to ``dest`` (a path of the service's own, created 0600), at most
    ``limit`` bytes (RunFileError past that); returns the size. What the run can change after this no longer
    matters: the service works on the copy."""
    with open_file(root, rel) as fd:
        size = os.fstat(fd).st_size
        if size > limit:
            raise RunFileError(errno.EFBIG, f"{Path(root) / rel} is {size} bytes, over the {limit}-byte cap: not taken")
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        copied = 0
        try:
            while copied <= limit:
                chunk = os.read(fd, 1024 * 1024)
                if not chunk:
                    break
                os.write(out, chunk)
                copied += len(chunk)
        finally:
            os.close(out)
        if copied > limit:
            raise RunFileError(errno.EFBIG, f"{Path(root) / rel} grew past the {limit}-byte cap while copied")
        return copied

"""The registry's safety net: an integrity check at start, and backup/restore with SQLite's online backup API.

A truncated or corrupt ``registry.sqlite3`` must stop the service with a sentence naming the file and the way
back, not half-work (a registry that answers some queries and loses rows). ``python -m service backup FILE``
copies a consistent snapshot while the service runs (the backup API copies page by page under SQLite's own
locking, WAL included); ``python -m service restore FILE`` checks the snapshot — sound, and holding nothing a
registry of ours does not (``registry.integrity.foreign``: a trigger, a view, a table or column not ours, a row naming
another run's folder) — and puts it in place, alone with the registry: while the service, its gateway or any process
has the registry open (``users``) it refuses, naming them, and changes nothing. A damaged registry is moved aside
(``registry.sqlite3.damaged-<time>``, never deleted); a sound one is copied to ``registry.sqlite3.replaced-<time>``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import RegistryDamaged, RegistryInUse
from .integrity import foreign
from .users import alone, hold

__all__ = ["RegistryDamaged", "RegistryInUse", "Restored", "check_registry", "backup", "restore"]


def _problem(path: Path) -> str | None:
    """None when ``path`` is a sound SQLite database, else what is wrong with it (one line)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error as e:
        return str(e)
    try:
        rows = db.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.DatabaseError as e:
        return str(e)
    finally:
        db.close()
    found = [str(r[0]) for r in rows]
    return None if found == ["ok"] else "; ".join(found[:3])


def check_registry(path: Path) -> None:
    """Raise RegistryDamaged when an existing, non-empty registry file is not a sound database."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    problem = _problem(path)
    if problem is not None:
        raise RegistryDamaged(
            f"the registry {path} is damaged ({problem}): the service will not start on it; stop the service and "
            f"restore the last backup with `python -m service restore <backup file>` (backups are made with "
            f"`python -m service backup <file>`), or move {path.name} aside to start with an empty registry")


def backup(db_path: Path, dest: Path) -> int:
    """A consistent copy of the live registry at ``dest`` (0600); its size in bytes."""
    if not db_path.is_file():
        raise FileNotFoundError(f"there is no registry at {db_path} to back up: check data_dir")
    check_registry(db_path)
    dest = dest.expanduser().resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.partial")
    tmp.unlink(missing_ok=True)
    using = hold(db_path)  # a restore waits for the copy (and a copy for a restore)
    try:
        _copy(db_path, tmp)
    finally:
        os.close(using)
    problem = _problem(tmp)
    if problem is not None:
        tmp.unlink(missing_ok=True)
        raise RegistryDamaged(f"the backup of {db_path} failed its integrity check ({problem}); nothing was written")
    os.replace(tmp, dest)
    return dest.stat().st_size


@dataclass(frozen=True)
class Restored:
    """What a restore did with the registry it replaced: moved aside when damaged, else kept as a copy."""

    kept: Path | None
    """Where the old registry is now (None: there was none)."""
    damaged: bool
    """The old registry was damaged (moved aside as ``.damaged-<time>``); else it was sound (``.replaced-<time>``)."""


def restore(db_path: Path, source: Path) -> Restored:
    """Put the backup ``source`` in place of the registry, alone with it (``users.alone``: RegistryInUse naming the
    processes that have it open). A damaged registry is moved aside; a sound one is first copied (the backup API,
    its WAL included) to ``.replaced-<time>``, so nothing it holds is lost either."""
    source = source.expanduser().resolve()
    if not source.is_file():
        raise FileNotFoundError(f"backup {source} does not exist: name the file `python -m service backup` wrote")
    problem = _problem(source)
    if problem is not None:
        raise RegistryDamaged(f"backup {source} is not a sound registry ({problem}): pick an older backup")
    found = _foreign(source)
    if found is not None:
        raise RegistryDamaged(f"backup {source} holds {found}: this service did not write that, so it is not "
                              f"restored; pick a backup `python -m service backup` made")
    db_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    with alone(db_path):
        if not db_path.exists():
            _copy(source, db_path)
            return Restored(None, damaged=False)
        damaged = _problem(db_path) is not None or _foreign(db_path) is not None
        if damaged:
            kept = db_path.with_name(f"{db_path.name}.damaged-{stamp}")
            for suffix in ("", "-wal", "-shm"):
                old = db_path.with_name(db_path.name + suffix)
                if old.exists():
                    os.replace(old, old.with_name(kept.name + suffix))
        else:
            kept = db_path.with_name(f"{db_path.name}.replaced-{stamp}")
            _copy(db_path, kept)
            for suffix in ("", "-wal", "-shm"):
                db_path.with_name(db_path.name + suffix).unlink(missing_ok=True)
        _copy(source, db_path)
    return Restored(kept, damaged=damaged)


def _foreign(path: Path) -> str | None:
    """What the file at ``path`` holds that a registry of ours does not (read-only, its schema not trusted)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        db.execute("PRAGMA trusted_schema=OFF")
        return foreign(db)
    finally:
        db.close()


def _copy(source: Path, dest: Path) -> None:
    """SQLite's online backup of ``source`` into a new file ``dest`` (0600, never an existing one or a link)."""
    os.close(os.open(dest, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(dest)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()

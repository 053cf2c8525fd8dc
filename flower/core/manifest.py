"""manifest.json: one row per step of every run in a run_dir, safe for parallel runs."""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside `path`, so read-modify-write cycles of two processes never interleave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_json(path: Path, data: Any) -> None:
    """Write through a temp file and rename, so a crash never leaves half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except ValueError as e:
        raise RuntimeError(f"{path} is not valid JSON ({e}); move it aside to start a new manifest") from e
    return rows if isinstance(rows, list) else []


def record(path: Path, run: str, rows: list[dict[str, Any]]) -> None:
    """Replace this run's rows, keep every other run's: append semantics across processes."""
    with locked(path):
        kept = [r for r in read_rows(path) if r.get("run") != run]
        write_json(path, kept + [{**r, "run": run} for r in rows])

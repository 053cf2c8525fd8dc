"""manifest.json: one row per step of every run in a run_dir, safe for parallel runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import ManifestError
from .files import locked, write_atomic


def read_rows(path: Path) -> list[dict[str, Any]]:
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except ValueError as e:
        raise ManifestError(f"{path} is not valid JSON ({e}); move it aside to start a new manifest", path=path) from e
    return rows if isinstance(rows, list) else []


def record(path: Path, run: str, rows: list[dict[str, Any]]) -> None:
    """Replace this run's rows, keep every other run's: append semantics across processes."""
    with locked(path):
        kept = [r for r in read_rows(path) if r.get("run") != run]
        write_atomic(path, json.dumps(kept + [{**r, "run": run} for r in rows], ensure_ascii=False, indent=1))

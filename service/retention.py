"""What an ended run leaves on disk, how much, and taking it away.

A run's folder (checkout, workbench, sessions, events, mailbox) is ~2 MB and more with its work; it stays
after the run so its events and manifest can be read, until the tenant deletes the run or it is older
than ``retain_days``. Only ended runs are ever touched here; the registry row stays as a tombstone and
the branch ``flower/<run>`` stays unless asked for (it is the team's work).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from sandbox.layout import RunLayout

__all__ = ["folder_bytes", "remove_run_files", "MAX_ENTRIES"]

MAX_ENTRIES = 200_000  # a folder with more entries is measured as far as this (a lower bound)


def folder_bytes(path: Path, *, most: int = MAX_ENTRIES) -> int:
    """Bytes the folder takes on disk (allocated blocks: a sparse file counts what it really uses); symlinks
    are not followed, other filesystems are not entered. 0 when it does not exist."""
    try:
        root_dev = os.lstat(path).st_dev
    except OSError:
        return 0
    total, seen, stack = 0, 0, [str(path)]
    while stack and seen < most:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                seen += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode) and st.st_dev == root_dev:
                    stack.append(entry.path)
                if seen >= most:
                    break
    return total


def remove_run_files(layout: RunLayout) -> list[str]:
    """Blocking: remove the run's folder (symlinks inside are removed, never followed); what could not be
    removed, as sentences (e.g. files a container wrote as another uid)."""
    errors: list[str] = []

    def note(_fn: object, p: str, info: tuple[type[BaseException], BaseException, object]) -> None:
        exc = info[1]
        if not isinstance(exc, FileNotFoundError) and len(errors) < 5:
            errors.append(f"{Path(p).relative_to(layout.dir) if p.startswith(str(layout.dir)) else p}: "
                          f"{getattr(exc, 'strerror', None) or exc}")

    if layout.dir.is_symlink():
        layout.dir.unlink()
    elif layout.dir.exists():
        shutil.rmtree(layout.dir, onerror=note)
    return errors

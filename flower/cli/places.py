"""Places: the workspace and the run dir a command works in, checked up front so a bad path is one line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .errors import Exit
from .messages import t


def workspace(args: argparse.Namespace, *, create: bool = True) -> Path:
    raw = Path(os.path.expanduser(str(args.workspace)))
    try:
        ws = raw.resolve()
    except (OSError, RuntimeError) as e:
        raise Exit(1, t("places.ws_unresolvable", path=raw, error=e))
    if ws.exists() and not ws.is_dir():
        raise Exit(1, t("places.ws_not_dir", path=ws))
    if not ws.exists():
        if not create:
            raise Exit(1, t("places.ws_missing", path=ws))
        try:
            ws.mkdir(parents=True)
        except OSError as e:
            raise Exit(1, t("places.ws_cannot_create", path=ws, error=e.strerror or e))
    try:
        with os.scandir(ws) as it:
            next(it, None)
    except OSError as e:
        raise Exit(1, t("places.ws_unreadable", path=ws, error=e.strerror or e))
    if create and not os.access(ws, os.W_OK | os.X_OK):
        raise Exit(1, t("places.ws_unwritable", path=ws))
    return ws


def run_dir(args: argparse.Namespace, ws: Path, *, create: bool = True) -> Path:
    raw = getattr(args, "run_dir", None)
    rd = (Path(os.path.expanduser(raw)).resolve() if raw else ws / "runs")
    if rd.exists() and not rd.is_dir():
        raise Exit(1, t("places.rd_not_dir", path=rd))
    if create:
        try:
            rd.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Exit(1, t("places.rd_cannot_create", path=rd, error=e.strerror or e))
        if not os.access(rd, os.W_OK | os.X_OK):
            raise Exit(1, t("places.rd_unwritable", path=rd))
    return rd


def exclude_from_git(ws: Path, *dirs: Path) -> None:
    """List flower's own folders in the repository's ``.git/info/exclude`` (never the user's .gitignore),
    so ``git status`` stays the user's. Outside a git repository, or when git is missing, nothing happens."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel", "--git-path", "info/exclude"], cwd=ws,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) != 2:
        return
    top = Path(lines[0]).resolve()
    exclude = Path(lines[1]) if Path(lines[1]).is_absolute() else ws / lines[1]
    wanted = []
    for d in dirs:
        try:
            wanted.append("/" + d.resolve().relative_to(top).as_posix() + "/")
        except ValueError:
            continue  # outside the repository (an -r elsewhere, an isolated workbench)
    try:
        have = exclude.read_text(encoding="utf-8").splitlines() if exclude.is_file() else []
        missing = [w for w in wanted if w not in have and w != "//"]
        if missing:
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with open(exclude, "a", encoding="utf-8") as f:
                if have and have[-1].strip():
                    f.write("\n")
                f.write("# flower's run state and workbench\n" + "".join(m + "\n" for m in missing))
    except OSError:
        pass  # a read-only .git: git status shows them, nothing breaks

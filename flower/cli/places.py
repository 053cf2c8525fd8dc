"""Places: the workspace and the run dir a command works in, checked up front so a bad path is one line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .errors import Exit


def workspace(args: argparse.Namespace, *, create: bool = True) -> Path:
    raw = Path(os.path.expanduser(str(args.workspace)))
    try:
        ws = raw.resolve()
    except (OSError, RuntimeError) as e:
        raise Exit(1, f"工作目录 {raw} 解析不了:{e}")
    if ws.exists() and not ws.is_dir():
        raise Exit(1, f"工作目录 {ws} 不是文件夹:-w 要指向一个目录")
    if not ws.exists():
        if not create:
            raise Exit(1, f"工作目录 {ws} 不存在")
        try:
            ws.mkdir(parents=True)
        except OSError as e:
            raise Exit(1, f"建不了工作目录 {ws}:{e.strerror or e};换个 -w,或者先把目录建好")
    try:
        with os.scandir(ws) as it:
            next(it, None)
    except OSError as e:
        raise Exit(1, f"工作目录 {ws} 读不了:{e.strerror or e};看看权限,或者换个 -w")
    if create and not os.access(ws, os.W_OK | os.X_OK):
        raise Exit(1, f"工作目录 {ws} 写不了:看看权限,或者换个 -w")
    return ws


def run_dir(args: argparse.Namespace, ws: Path, *, create: bool = True) -> Path:
    raw = getattr(args, "run_dir", None)
    rd = (Path(os.path.expanduser(raw)).resolve() if raw else ws / "runs")
    if rd.exists() and not rd.is_dir():
        raise Exit(1, f"运行目录 {rd} 不是文件夹:-r 要指向一个目录")
    if create:
        try:
            rd.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Exit(1, f"建不了运行目录 {rd}:{e.strerror or e};换个 -r")
        if not os.access(rd, os.W_OK | os.X_OK):
            raise Exit(1, f"运行目录 {rd} 写不了:看看权限,或者换个 -r")
    return rd

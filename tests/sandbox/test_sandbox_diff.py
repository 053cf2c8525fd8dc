"""A run's diff read from the team's repository without ever holding it whole: the file list from
``--numstat`` (bounded), the diff measured against a cap before it is sent, then streamed; one file by the
name git listed, never a pathspec or an option the client made up."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from sandbox.checkpoint import checkpoint
from sandbox.worktree import Changes, DiffTooLarge, diff, diff_files, diff_stream, import_bundle, make_workspace


def run_work(repo: Path, tmp_path: Path, files: dict[bytes, bytes]) -> str:
    """A run's checkout with ``files`` written and handed back on ``flower/r1``; returns the base."""
    ws, bundle = tmp_path / "run" / "checkout", tmp_path / "run" / "work.bundle"
    base = make_workspace(repo, ws, "flower/r1")
    for name, data in files.items():
        (ws / os.fsdecode(name)).write_bytes(data)
    checkpoint(ws, bundle, branch="flower/r1", base=base, message="work")
    import_bundle(repo, bundle, "flower/r1", base=base)
    return base


def read(repo: Path, changes: Changes, cap: int, name: bytes | None = None) -> bytes:
    async def collect() -> bytes:
        return b"".join([c async for c in await diff_stream(repo, changes, cap=cap, name=name)])
    return asyncio.run(collect())


def test_files_and_one_files_diff_by_the_name_git_listed(git_workspace: Path, tmp_path: Path) -> None:
    base = run_work(git_workspace, tmp_path, {b"small.py": b"print(1)\n", b"*.py": b"glob\n", b"-n": b"dash\n",
                                              b"logo.bin": b"\0\1\2" * 100, b"caf\xe9.txt": b"latin-1 name\n"})
    changes = diff_files(git_workspace, "flower/r1", base=base)
    assert changes.commit == subprocess.run(["git", "rev-parse", "flower/r1"], cwd=git_workspace, text=True,
                                            capture_output=True).stdout.strip() and not changes.truncated
    by_path = {f.path: f for f in changes.files}
    assert sorted(by_path) == sorted(["small.py", "*.py", "-n", "logo.bin", "caf\ufffd.txt"])
    assert (by_path["small.py"].insertions, by_path["small.py"].binary) == (1, False)
    assert by_path["logo.bin"].binary and by_path["caf\ufffd.txt"].name == b"caf\xe9.txt"
    glob = read(git_workspace, changes, 1 << 20, changes.find("*.py").name)  # type: ignore[union-attr]
    assert b"+glob" in glob and b"small.py" not in glob, "the name is a path, never a glob"
    dash = read(git_workspace, changes, 1 << 20, b"-n")
    assert b"+dash" in dash and b"small.py" not in dash, "after --, a name is never an option"
    assert b"+latin-1 name" in read(git_workspace, changes, 1 << 20, b"caf\xe9.txt")
    assert diff_files(git_workspace, "flower/r1", base=base, limit=2).truncated


def test_a_diff_is_measured_against_its_cap_then_streamed_whole(git_workspace: Path, tmp_path: Path) -> None:
    big = b"".join(b"line %07d of a file larger than one read of git\n" % i for i in range(60_000))  # ~3 MB
    base = run_work(git_workspace, tmp_path, {b"big.txt": big, b"small.txt": b"small\n"})
    changes = diff_files(git_workspace, "flower/r1", base=base)
    whole = diff(git_workspace, "flower/r1", base=base).encode()
    assert len(whole) > 2 << 20
    assert read(git_workspace, changes, 10 << 20) == whole, "streamed in chunks, the same bytes"
    with pytest.raises(DiffTooLarge):
        read(git_workspace, changes, 1 << 20)
    assert read(git_workspace, changes, 1000, b"small.txt").endswith(b"+small\n"), "one file under the cap"

"""The file helpers every writer shares: atomic writes under concurrency, private mode, content addressing."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from flower.core.files import spill_file, write_atomic


def test_concurrent_writers_of_one_file_never_collide_or_leave_temps(tmp_path: Path):
    target = tmp_path / "INDEX.md"
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            for _ in range(50):
                write_atomic(target, f"version {i}\n" * 200)
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    text = target.read_text()
    assert len(set(text.splitlines())) == 1, "a file mixed two writers"
    assert [p.name for p in tmp_path.iterdir()] == ["INDEX.md"]


def test_private_files_are_0600_and_others_follow_the_umask(tmp_path: Path):
    old = os.umask(0o022)
    try:
        assert write_atomic(tmp_path / "a" / "answer.json", "{}", private=True).stat().st_mode & 0o777 == 0o600
        assert write_atomic(tmp_path / "notes.md", "x").stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)


def test_spill_files_are_content_addressed_and_written_once(tmp_path: Path):
    first = spill_file(tmp_path / "spill", "long output \udc80 with a lone surrogate")
    mtime = first.stat().st_mtime_ns
    again = spill_file(tmp_path / "spill", "long output \udc80 with a lone surrogate")
    assert again == first and again.stat().st_mtime_ns == mtime and len(first.stem) == 16
    assert spill_file(tmp_path / "spill", "other") != first

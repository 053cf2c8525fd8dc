"""Lineage: step → session and the wake count across processes, guarded by the workspace path."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from flower.core.lineage import Lineage


def test_fields_and_open_of_a_missing_file(tmp_path):
    lin = Lineage.open(tmp_path / "runs", tmp_path / "ws" / ".." / "ws")
    assert lin.path == tmp_path / "runs" / "lineage.json"
    assert lin.workspace == (tmp_path / "ws").resolve()  # __post_init__ resolves
    assert (lin.steps, lin.woke) == ({}, 0) and not lin.path.exists()  # opening writes nothing


def test_remember_writes_at_once_and_a_new_process_reads_it(tmp_path):
    runs, ws = tmp_path / "runs", tmp_path
    lin = Lineage.open(runs, ws)
    lin.remember("确认需求", "sess-a")
    lin.remember("干活", "sess-b")
    lin.remember("干活", "sess-c")  # a newer session replaces the old one
    again = Lineage.open(runs, ws)
    assert again.steps == {"确认需求": "sess-a", "干活": "sess-c"} and again.lookup("干活") == "sess-c"
    data = json.loads(lin.path.read_text())
    assert data["steps"] == again.steps and data["workspace"] == str(ws.resolve()) and data["woke"] == 0
    assert "确认需求" in lin.path.read_text()  # readable by a person, not \u-escaped


def test_empty_step_or_session_is_ignored(tmp_path):
    lin = Lineage.open(tmp_path, tmp_path)
    lin.remember("", "x")
    lin.remember("a", "")
    assert lin.steps == {} and not lin.path.exists()


def test_bump_counts_wake_ups_across_processes(tmp_path):
    assert Lineage.open(tmp_path, tmp_path).bump() == 1  # the first run
    lin = Lineage.open(tmp_path, tmp_path)
    assert lin.woke == 1 and lin.bump() == 2
    assert Lineage.open(tmp_path, tmp_path).woke == 2


def test_another_workspace_s_lineage_reads_as_empty(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    lin = Lineage.open(tmp_path / "runs", a)
    lin.remember("干活", "sess-1")
    lin.bump()
    moved = Lineage.open(tmp_path / "runs", b)  # the folder moved: its session ids cannot be found
    assert (moved.steps, moved.woke) == ({}, 0)
    assert Lineage.open(tmp_path / "runs", a).steps == {"干活": "sess-1"}


@pytest.mark.parametrize("content", ["{not json", '["a"]', '{"a": "1"}', "", "\xff"])
def test_an_unreadable_file_reads_as_empty_without_error(tmp_path, content):
    path = tmp_path / "lineage.json"
    path.write_bytes(content.encode("latin-1"))
    lin = Lineage.open(tmp_path, tmp_path)
    assert (lin.steps, lin.woke) == ({}, 0)
    lin.remember("a", "1")  # and the next write replaces it with a good file
    assert Lineage.open(tmp_path, tmp_path).steps == {"a": "1"}


def test_bad_entries_are_dropped_not_fatal(tmp_path):
    path = tmp_path / "lineage.json"
    path.write_text(json.dumps({"workspace": str(tmp_path.resolve()), "woke": "x",
                                "steps": {"a": "1", "b": 3, "c": ""}}))
    lin = Lineage.open(tmp_path, tmp_path)
    assert (lin.steps, lin.woke) == ({"a": "1"}, 0)


def test_a_failed_write_never_raises(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    lin = Lineage(blocker / "lineage.json", tmp_path)  # its folder cannot exist
    lin.remember("a", "1")
    assert lin.bump() == 1 and lin.steps == {"a": "1"}


def test_writes_leave_no_temp_files(tmp_path):
    lin = Lineage.open(tmp_path, tmp_path)
    for i in range(5):
        lin.remember(f"s{i}", f"id{i}")
    lin.bump()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lineage.json", "lineage.json.lock"]


def test_archive_moves_the_file_and_extras_and_resets(tmp_path):
    runs = tmp_path / "runs"
    lin = Lineage.open(runs, tmp_path)
    lin.remember("干活", "sess-1")
    lin.bump()
    brief, goal = tmp_path / "需求.md", tmp_path / "目标.md"
    brief.write_text("b")
    goal.write_text("g")
    where = lin.archive(runs / "archive", extra=[brief, goal, tmp_path / "missing.md"])
    assert where.parent == runs / "archive" and len(where.name) == len("20250101-120000")
    assert sorted(p.name for p in where.iterdir()) == ["lineage.json", "目标.md", "需求.md"]
    assert not brief.exists() and not (runs / "lineage.json").exists()  # moved, not copied
    assert (lin.steps, lin.woke) == ({}, 0) and json.loads((where / "lineage.json").read_text())["woke"] == 1
    again = lin.archive(runs / "archive")  # twice in one second: a second folder, nothing overwritten
    assert again != where and (where / "lineage.json").exists()
    assert Lineage.open(runs, tmp_path).steps == {}


def test_forget(tmp_path):
    lin = Lineage.open(tmp_path, tmp_path)
    lin.remember("a", "1")
    lin.remember("b", "2")
    assert lin.forget("a") is True and lin.forget("a") is False
    assert Lineage.open(tmp_path, tmp_path).steps == {"b": "2"}


def _remember_many(run_dir: str, ws: str, prefix: str, n: int, start: Any) -> None:
    lin = Lineage.open(run_dir, ws)
    start.wait(30)  # both processes write at the same time, not one after the other
    for i in range(n):
        lin.remember(f"{prefix}-{i}", f"session-{prefix}-{i}")
    lin.bump()


def test_two_processes_remembering_at_once_lose_nothing(tmp_path):
    runs, ws = tmp_path / "runs", tmp_path / "ws"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_remember_many, args=(str(runs), str(ws), p, 100, start)) for p in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lin = Lineage.open(runs, ws)
    assert len(lin.steps) == 200 and lin.woke == 2
    assert lin.steps["a-99"] == "session-a-99" and lin.steps["b-0"] == "session-b-0"


def test_path_accepts_str(tmp_path):
    lin = Lineage(str(tmp_path / "l.json"), str(tmp_path))  # type: ignore[arg-type]
    assert isinstance(lin.path, Path) and isinstance(lin.workspace, Path)

"""Lineage: step → session across processes; never silently reset, never loses a concurrent write."""

from __future__ import annotations

import json
import multiprocessing
from typing import Any

import pytest

from flower.core.lineage import Lineage, LineageError


def test_remember_lookup_forget(tmp_path):
    lin = Lineage(tmp_path / "runs" / "lineage.json")
    assert lin.lookup("确认需求") is None and lin.steps() == {} and lin.forget("x") is False
    lin.remember("确认需求", "sess-a")
    lin.remember("干活", "sess-b")
    lin.remember("干活", "sess-c")  # a newer session replaces the old one
    assert lin.lookup("确认需求") == "sess-a" and lin.get("干活") == "sess-c"
    assert lin.steps() == {"确认需求": "sess-a", "干活": "sess-c"}
    assert lin.forget("确认需求") is True and lin.forget("确认需求") is False
    assert lin.steps() == {"干活": "sess-c"}


def test_survives_a_new_process_view(tmp_path):
    path = tmp_path / "lineage.json"
    Lineage(path).remember("设定目标", "s1")
    assert Lineage(path).lookup("设定目标") == "s1"
    data = json.loads(path.read_text())
    assert data == {"version": 1, "steps": {"设定目标": "s1"}}
    assert "设定目标" in path.read_text()  # readable by a person, not \u-escaped


def test_writes_leave_no_temp_files(tmp_path):
    lin = Lineage(tmp_path / "lineage.json")
    for i in range(5):
        lin.remember(f"s{i}", f"id{i}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lineage.json", "lineage.json.lock"]


def test_same_mapping_is_not_rewritten(tmp_path):
    lin = Lineage(tmp_path / "lineage.json")
    lin.remember("a", "1")
    before = lin.path.stat().st_mtime_ns, lin.path.stat().st_ino
    lin.remember("a", "1")
    assert (lin.path.stat().st_mtime_ns, lin.path.stat().st_ino) == before


@pytest.mark.parametrize("content,why", [
    ("{not json", "not valid JSON"),
    ('["a"]', '"steps"'),
    ('{"a": "1"}', '"steps"'),
    ('{"version": 1, "steps": {"a": 3}}', "not a non-empty string"),
    ('{"version": 1, "steps": {"a": ""}}', "not a non-empty string"),
])
def test_a_corrupt_file_is_an_error_naming_it_never_a_reset(tmp_path, content, why):
    path = tmp_path / "lineage.json"
    path.write_text(content)
    lin = Lineage(path)
    for op in (lin.steps, lambda: lin.lookup("a"), lambda: lin.remember("b", "2"), lambda: lin.forget("a")):
        with pytest.raises(LineageError) as e:
            op()
        assert str(path) in str(e.value) and why in str(e.value) and "delete it" in str(e.value)
    assert path.read_text() == content  # untouched: the person decides


def test_an_empty_file_holds_nothing_to_lose(tmp_path):
    path = tmp_path / "lineage.json"
    path.write_text("")
    lin = Lineage(path)
    assert lin.steps() == {}
    lin.remember("a", "1")
    assert lin.steps() == {"a": "1"}


def test_bad_arguments(tmp_path):
    lin = Lineage(tmp_path / "lineage.json")
    with pytest.raises(ValueError):
        lin.remember("", "x")
    with pytest.raises(ValueError):
        lin.remember("a", "")


def _remember_many(path: str, prefix: str, n: int, start: Any) -> None:
    lin = Lineage(path)
    start.wait(30)  # both processes write at the same time, not one after the other
    for i in range(n):
        lin.remember(f"{prefix}-{i}", f"session-{prefix}-{i}")


def test_two_processes_remembering_at_once_lose_nothing(tmp_path):
    path = tmp_path / "runs" / "lineage.json"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_remember_many, args=(str(path), p, 100, start)) for p in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    steps = Lineage(path).steps()
    assert len(steps) == 200
    assert steps["a-99"] == "session-a-99" and steps["b-0"] == "session-b-0"

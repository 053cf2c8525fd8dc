"""manifest.json keeps every run's rows when several processes write to one run_dir."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from flower.core import manifest


def _writer(path: str, run: str, steps: int) -> None:
    rows: list[dict] = []
    for i in range(steps):  # as Runtime does: every step re-records all of this run's rows
        rows.append({"step": f"s{i}", "ok": True})
        manifest.record(Path(path), run, rows)


def test_two_processes_append_200_steps_each(tmp_path: Path):
    path = tmp_path / "manifest.json"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), run, 200)) for run in ("run-a", "run-b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = json.loads(path.read_text())
    assert len(rows) == 400
    assert {r["run"] for r in rows} == {"run-a", "run-b"}
    assert sorted(r["step"] for r in rows if r["run"] == "run-a") == sorted(f"s{i}" for i in range(200))


def test_a_run_renews_its_own_rows_and_keeps_the_others(tmp_path: Path):
    path = tmp_path / "manifest.json"
    manifest.record(path, "a", [{"step": "x"}])
    manifest.record(path, "b", [{"step": "y"}])
    manifest.record(path, "a", [{"step": "x"}, {"step": "z"}])
    assert [(r["run"], r["step"]) for r in json.loads(path.read_text())] == [("b", "y"), ("a", "x"), ("a", "z")]


def test_a_corrupt_manifest_is_reported_not_overwritten(tmp_path: Path):
    path = tmp_path / "manifest.json"
    path.write_text("{half a file")
    with pytest.raises(RuntimeError, match="not valid JSON"):
        manifest.record(path, "a", [{"step": "x"}])
    assert path.read_text() == "{half a file"

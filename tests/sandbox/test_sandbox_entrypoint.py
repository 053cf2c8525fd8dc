"""The entrypoint's refusals: every way a run cannot start ends in exit.json, one line, exit code 2, no traceback."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flower.core.events import Event
from sandbox.backends import LocalBackend
from sandbox.entrypoint import EventLog, jsonable
from sandbox.envfile import write_env_file
from sandbox.layout import RunLayout
from sandbox.spec import RunSpec, write_spec
from sandbox.worktree import make_workspace


def _run(spec_file: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(spec_file.parent / "home")}
    return subprocess.run([sys.executable, "-m", "sandbox.entrypoint", str(spec_file)], env={**base, **env},
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def layout(git_workspace: Path, tmp_path: Path) -> RunLayout:
    lay = RunLayout(tmp_path / "runs", "r1", git_workspace.name).ensure()
    make_workspace(git_workspace, lay.workspace, lay.branch)
    write_spec(lay, RunSpec("r1", "team", "做个东西"))
    return lay


def _refused(out: subprocess.CompletedProcess[str], layout: RunLayout, message: str) -> dict:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr
    data = json.loads(layout.exit_file.read_text())
    assert data["status"] == "failed" and message in data["error"] and data["exit_code"] == 2
    return data


def test_a_missing_credential_fails_in_one_line(layout: RunLayout) -> None:
    write_env_file(layout.env_file, {"TZ": "UTC"})
    out = _run(layout.spec_file, {"FLOWER_ENV": str(layout.env_file)})
    _refused(out, layout, "no credentials in the run's env file")


def test_without_FLOWER_ENV_nothing_else_is_looked_at(layout: RunLayout) -> None:
    out = _run(layout.spec_file, {"ANTHROPIC_API_KEY": "from-the-environment-not-the-file"})
    _refused(out, layout, "no credentials: FLOWER_ENV must name the run's env file")


def test_the_service_hosts_credential_files_are_never_read(layout: RunLayout, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's own ~/.config/flower/.env and ~/.claude/settings.json hold a key: the run must not see it."""
    service_home = tmp_path / "service-home"
    write_env_file(service_home / ".config" / "flower" / ".env", {"ANTHROPIC_API_KEY": "sk-service-own"})
    (service_home / ".claude").mkdir(parents=True)
    (service_home / ".claude" / "settings.json").write_text(json.dumps({"env": {"ANTHROPIC_API_KEY": "sk-x"}}))
    monkeypatch.setenv("HOME", str(service_home))
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "service-process-token")
    write_env_file(layout.env_file, {"TZ": "UTC"})
    backend = LocalBackend()
    handle = backend.start(layout, RunSpec("r1", "team", "做个东西"))
    assert backend.wait(handle, 60) == 2
    assert "no credentials in the run's env file" in json.loads(layout.exit_file.read_text())["error"]
    assert "Traceback" not in layout.log.read_text()


def test_a_bad_spec_fails_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    (run / "mailbox").mkdir(parents=True)
    (run / "mailbox" / "spec.json").write_text(json.dumps({"run_id": "r1", "tenant": "t", "ask": "x",
                                                           "options": {"x": 1}}))
    out = _run(run / "mailbox" / "spec.json", {})
    assert out.returncode == 2 and "Traceback" not in out.stderr and "unknown option 'x'" in out.stderr
    assert json.loads((run / "outbox" / "exit.json").read_text())["status"] == "failed"


def test_a_run_without_its_worktree_fails_in_one_line(tmp_path: Path) -> None:
    lay = RunLayout(tmp_path / "runs", "r1", "repo").ensure()
    write_spec(lay, RunSpec("r1", "team", "做个东西"))
    write_env_file(lay.env_file, {"ANTHROPIC_API_KEY": "sk-test"})
    out = _run(lay.spec_file, {"FLOWER_ENV": str(lay.env_file)})
    _refused(out, lay, "does not exist: add it before starting the run")


def test_events_keep_only_what_json_can_carry(tmp_path: Path) -> None:
    assert jsonable({"a": 1, "b": object(), "c": [1, object(), {"d": math.nan}], 3: Path("/x"), (1,): 2}) == \
        {"a": 1, "c": [1, {"d": None}], "3": "/x"}
    log = EventLog(tmp_path / "events.jsonl")
    log.event(Event("step", "工作", payload={"index": 2}))
    log.event(Event("tool_call", "x.py", tool="Write", payload={"input": {"file_path": "x.py"}, "raw": object()},
                    raw=object()))
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [set(x) for x in lines] == [{"kind", "text", "tool", "payload", "step", "at"}] * 2
    assert lines[1]["payload"] == {"input": {"file_path": "x.py"}} and lines[1]["step"] == "工作"

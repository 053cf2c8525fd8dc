"""A whole run through the local backend: the real CLI against the scripted model, in a real worktree."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from flower.core.channel import MailboxAnswers
from flower.testing import ScriptedModel
from sandbox.backends import Backend, LocalBackend
from sandbox.layout import RunLayout
from sandbox.runfiles import write_file
from sandbox.testing import (QUESTION, Person, marked_pids, prepare, read_events, starter_rules, wait_asking,
                             waiting_rules)
from sandbox.worktree import diff, import_bundle

pytestmark = pytest.mark.cli


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def runs(tmp_path: Path):
    """The runs folder; whatever still runs there when a test ends (a failed one) is killed."""
    root = tmp_path / "runs"
    yield root
    sweeper = LocalBackend(root=root)
    for handle in sweeper.live().values():
        sweeper.remove(handle)


def test_a_scripted_run_end_to_end(git_workspace: Path, runs: Path) -> None:
    repo, run_id = git_workspace, "local-e2e"
    main_head = git(repo, "rev-parse", "HEAD")
    with ScriptedModel(starter_rules(runs / run_id / repo.name)) as model:
        layout, spec = prepare(repo, runs, run_id, model, options={"timeout_s": 60})
        backend = LocalBackend(root=runs)
        assert isinstance(backend, Backend)
        t0 = time.monotonic()
        handle = backend.start(layout, spec)
        with Person(layout.mailbox, ["1"], questions=layout.questions) as person:
            code = backend.wait(handle, 180)
        took = time.monotonic() - t0
        assert code == 0, layout.log.read_text()[-3000:]
        assert model.unmatched == []
    assert [q["question"] for q in person.asked] == [QUESTION]
    assert backend.state(handle) == "exited" and backend.exit_code(handle) == 0 and backend.live() == {}

    done = json.loads(layout.exit_file.read_text())
    assert done["status"] == "succeeded" and done["error"] is None and done["exit_code"] == 0
    assert [s["step"] for s in done["steps"]] == ["确认需求", "设定目标", "工作", "工作·判定#1"]
    assert all(s["ok"] for s in done["steps"]) and done["cost_usd"] == 0  # the scripted model sets no usage: no cost

    lines = read_events(layout)
    assert all(set(x) == {"kind", "text", "tool", "payload", "step", "at"} for x in lines)
    assert lines[0]["kind"] == "system" and lines[0]["payload"]["workbench"] == str(layout.workbench)
    assert [x["text"] for x in lines if x["kind"] == "step"] == ["确认需求", "设定目标", "工作"]
    calls = [(x["tool"], x["step"]) for x in lines if x["kind"] == "tool_call"]
    assert ("mcp__human__ask", "确认需求") in calls and ("Agent", "工作") in calls and ("Write", "工作") in calls
    assert any(x["kind"] == "ask" and x["text"] == QUESTION and x["payload"]["state"] == "answered" for x in lines)
    denied = [x for x in lines if x["kind"] == "audit" and x["text"] == "deny"]
    assert len(denied) == 1 and denied[0]["tool"] == "Write" and denied[0]["step"] == "工作"
    assert denied[0]["payload"]["guard"] == "delegate" and denied[0]["payload"]["audit"] == "deny"

    # the workbench sits outside the worktree; the coordinator's own Write never happened
    assert (layout.workbench / "notes" / "需求.md").is_file()
    assert not (layout.workspace / ".flower").exists() and not (layout.workspace / "boss.txt").exists()
    assert (layout.workspace / "hello.py").read_text() == "print('hello')\n"

    assert any(x["kind"] == "checkpoint" for x in lines), "the runner handed its work back"
    sha = import_bundle(repo, layout.bundle, f"flower/{run_id}", base=spec.base)
    assert sha and git(repo, "rev-parse", f"flower/{run_id}").strip() == sha
    changed = diff(repo, f"flower/{run_id}", base="main")
    assert "+++ b/hello.py" in changed and "+print('hello')" in changed
    assert git(repo, "diff", "--name-only", "main", f"flower/{run_id}") == "hello.py\n", "only the worker's file"
    # the team's checkout is untouched
    assert git(repo, "rev-parse", "HEAD") == main_head and git(repo, "status", "--porcelain") == ""
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md"]
    print(f"local run end to end: {took:.1f}s, {len(lines)} event lines")


def _gone(run_id: str) -> bool:
    deadline = time.monotonic() + 5
    while marked_pids(run_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    return marked_pids(run_id) == []


def test_live_re_attach_and_stop_means_killed(git_workspace: Path, runs: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    repo, run_id = git_workspace, "local-stop"
    monkeypatch.setenv("SERVICE_SECRET", "never-in-a-run")
    with ScriptedModel(waiting_rules()) as model:
        layout, spec = prepare(repo, runs, run_id, model, options={"timeout_s": 600})
        first = LocalBackend(root=runs)
        handle = first.start(layout, spec)
        wait_asking(first, handle, layout)
        assert first.live() == {run_id: handle}

        # a restarted service: a new backend finds the same run, with the same handle
        again = LocalBackend(root=runs)
        assert again.live() == {run_id: handle} and again.state(handle) == "running"
        assert again.exit_code(handle) is None
        pid = int(handle.split(":")[1])
        env = dict(item.split("=", 1) for item in
                   Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in item)
        assert env["HOME"] == str(layout.home) and env["FLOWER_ENV"] == str(layout.env_file)
        assert set(env) <= {"PATH", "HOME", "FLOWER_ENV", "LANG", "PYTHONUNBUFFERED", "FLOWER_RUN_ID",
                            "FLOWER_TENANT"}, "nothing of the service's environment"

        t0 = time.monotonic()
        again.stop(handle, timeout=10)
        assert time.monotonic() - t0 < 5
    assert again.state(handle) == "exited" and again.exit_code(handle) == 143 and again.live() == {}
    done = json.loads(layout.exit_file.read_text())
    assert done["status"] == "killed" and done["exit_code"] == 143 and "SIGTERM" in done["error"]
    assert [(s["step"], s["error"]) for s in done["steps"]] == [("确认需求", "killed-by-signal")]
    rows = json.loads((layout.run_dir / "manifest.json").read_text())
    assert [r["error"] for r in rows] == ["killed-by-signal"], "runtime.rescue() put the step in flight there"
    assert read_events(layout)[-1]["payload"] == {"subtype": "killed", "signal": "SIGTERM"}
    assert _gone(run_id), "nothing of the run is left running"
    first.remove(handle)
    assert first.state(handle) == "missing"


def test_a_sigterm_from_anyone_ends_the_whole_run(git_workspace: Path, runs: Path) -> None:
    """Not through the backend: the entrypoint itself takes its CLI down with it."""
    import os
    import signal

    with ScriptedModel(waiting_rules()) as model:
        layout, spec = prepare(git_workspace, runs, "local-term", model, options={"timeout_s": 600})
        backend = LocalBackend(root=runs)
        handle = backend.start(layout, spec)
        wait_asking(backend, handle, layout)
        assert len(marked_pids("local-term")) >= 2, "the entrypoint and its CLI"
        from sandbox.backends.local import _entrypoint_of

        entry = _entrypoint_of(int(handle.split(":")[1]))
        assert entry != int(handle.split(":")[1]), "under bubblewrap the entrypoint is a process of its own"
        os.kill(entry, signal.SIGTERM)
        assert backend.wait(handle, 10) == 143
    assert json.loads(layout.exit_file.read_text())["status"] == "killed"
    assert _gone("local-term")


def test_the_local_backend_has_no_networks(git_workspace: Path, tmp_path: Path) -> None:
    from sandbox.backends import BackendError
    from sandbox.spec import RunSpec

    with pytest.raises(BackendError, match="cannot put a run on a named network"):
        LocalBackend().start(RunLayout(tmp_path, "r1", "ws"), RunSpec("r1", "t", "x"), network="flower-runs")


def test_start_needs_the_spec_file(tmp_path: Path) -> None:
    from sandbox.backends import BackendError
    from sandbox.spec import RunSpec

    with pytest.raises(BackendError, match="write the spec"):
        LocalBackend().start(RunLayout(tmp_path, "r1", "ws"), RunSpec("r1", "t", "x"))


def test_an_interrupt_through_the_mailbox_redirects_the_step(git_workspace: Path, runs: Path) -> None:
    """``mailbox/interrupt.json`` stops the step in flight — even while it waits on a question, which is then
    withdrawn — and the step continues its session with the person's words."""
    from flower.testing import Rule, say

    from sandbox.testing import BRIEF, CLARIFIER

    repo, run_id = git_workspace, "local-interrupt"
    words = "别问了:只做 hello"
    rules = [*waiting_rules(), Rule(say(BRIEF), system=CLARIFIER, user=words)]
    with ScriptedModel(rules) as model:
        layout, spec = prepare(repo, runs, run_id, model, options={"timeout_s": 600, "clarify_only": True})
        backend = LocalBackend(root=runs)
        handle = backend.start(layout, spec)
        wait_asking(backend, handle, layout)
        st = layout.mailbox.stat()  # written as the service writes mail: owned by the run's uid (a root service's)
        write_file(layout.mailbox, "interrupt.json", json.dumps({"words": words}).encode(),
                   owner=(st.st_uid, st.st_gid))
        assert backend.wait(handle, 120) == 0, layout.log.read_text()[-3000:]
        assert model.unmatched == []
        clarifier = [r for r in model.conversation if CLARIFIER in r.system]
        assert any(words in r.user for r in clarifier)
        assert len({r.session for r in clarifier}) == 1, "the same session continued"
    done = json.loads(layout.exit_file.read_text())
    assert done["status"] == "succeeded" and [s["step"] for s in done["steps"]] == ["确认需求"]
    assert MailboxAnswers.pending(layout.mailbox, layout.questions) == []
    log = (layout.workbench / "notes" / "问答记录.md").read_text()
    assert "打断" in log and words in log


def test_a_run_of_the_same_name_in_another_runs_root_is_not_killed_with_this_one(tmp_path: Path) -> None:
    """cgroups are the machine's: two services (or two test sessions) on one machine may each have a run of one
    name. Removing one kills what is in its cgroups — only its own (it once killed the other's run too)."""
    from sandbox.backends.local import cgroup_name

    sides = []
    for side in ("a", "b"):
        root = tmp_path / side / "runs"
        backend = LocalBackend(root=root)
        layout = RunLayout(root, "same-name", "repo").ensure()
        layout.workspace.mkdir(mode=0o700)
        layout.gateway.mkdir(mode=0o755, exist_ok=True)
        sides.append((backend, backend.warm(layout, objects=None, egress="closed"), layout))
    (a, ha, la), (b, hb, lb) = sides
    try:
        assert cgroup_name(la.dir) != cgroup_name(lb.dir)
        assert a.state(ha) == b.state(hb) == "running"
        if a.limits(ha):  # where this machine lets the backend write cgroups
            assert b.limits(hb) == a.limits(ha)
        a.remove(ha)  # returns once its cgroups are empty
        assert b.state(hb) == "running", b.logs(hb)[-2000:]
    finally:
        for backend, handle, _ in sides:
            backend.remove(handle)

"""What a resumed run's entrypoint settles before its flow runs (``sandbox.resume``): the questions its last sandbox
left open — answered, timed out, still open — and the git locks a killed sandbox left in its checkout."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from flower.core.channel import TIMEOUT
from sandbox.checkpoint import CheckpointError, checkpoint
from sandbox.layout import RunLayout
from sandbox.resume import STILL_OPEN, left_questions, note_of, stale_locks
from sandbox.spec import Resume, RunSpec
from sandbox.worktree import make_workspace

RUN = "20260101-000000-" + "a" * 32


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


def _layout(tmp_path: Path) -> RunLayout:
    repo = tmp_path / "team"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("a\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return RunLayout(tmp_path / "runs", RUN, "team").ensure()


def _ask(layout: RunLayout, qid: str, question: str, *, asked: datetime, timeout_s: float | None) -> None:
    layout.questions.mkdir(parents=True, exist_ok=True)
    (layout.questions / f"{qid}.json").write_text(json.dumps(
        {"id": qid, "question": question, "options": [], "asked_at": asked.isoformat(), "timeout_s": timeout_s}))


def test_the_questions_left_open_are_answered_timed_out_or_still_open_and_the_step_is_told(tmp_path: Path):
    layout = _layout(tmp_path)
    now = datetime.now(timezone.utc)
    _ask(layout, "q1", "用什么语言?", asked=now - timedelta(seconds=5), timeout_s=3600)
    _ask(layout, "q2", "要不要测试?", asked=now - timedelta(seconds=100), timeout_s=60)
    _ask(layout, "q3", "多久交?", asked=now - timedelta(seconds=5), timeout_s=None)
    (layout.mailbox / "answers").mkdir(parents=True, exist_ok=True)
    (layout.mailbox / "answers" / "q1.json").write_text(json.dumps({"text": "Python"}))
    left = {q.id: q for q in left_questions(layout, now=now.timestamp())}
    assert (left["q1"].answer, left["q1"].timed_out) == ("Python", False)
    assert (left["q2"].answer, left["q2"].timed_out) == (None, True), "past its timeout, and nobody answered"
    assert (left["q3"].answer, left["q3"].timed_out) == (None, False)
    spec = RunSpec(run_id=RUN, tenant="acme", ask="x", resume=Resume(n=1, cause="unparked"))
    note = note_of(spec, list(left.values()))
    assert note.startswith("[接着做]") and "交还了沙箱" in note
    assert "「用什么语言?」\n需求方的回答:Python" in note
    assert "「要不要测试?」\n" + TIMEOUT.split("(")[0] in note, "the channel's own words: never an invented answer"
    assert f"「多久交?」\n{STILL_OPEN}" in note


def test_a_killed_sandboxs_git_locks_go_and_the_resumed_run_checkpoints_again(tmp_path: Path):
    layout = _layout(tmp_path)
    base = make_workspace(tmp_path / "team", layout.workspace, layout.branch)
    (layout.workspace / "b.txt").write_text("b\n")
    (layout.workspace / ".git" / "index.lock").write_text("")  # git add was running when the sandbox was killed
    ref_lock = layout.workspace / ".git" / "refs" / "heads" / "flower" / f"{RUN}.lock"
    ref_lock.parent.mkdir(parents=True, exist_ok=True)
    ref_lock.write_text("")
    with pytest.raises(CheckpointError, match="index.lock"):  # what every checkpoint of the resumed run met
        checkpoint(layout.workspace, layout.bundle, branch=layout.branch, base=base, message="x")
    assert sorted(stale_locks(layout)) == ["index.lock", f"refs/heads/flower/{RUN}.lock"]
    assert checkpoint(layout.workspace, layout.bundle, branch=layout.branch, base=base, message="x")
    assert "b.txt" in _git(layout.workspace, "show", "--stat", "HEAD")


@pytest.mark.cli
def test_the_work_is_handed_back_while_a_long_step_runs_not_only_at_its_end(git_workspace: Path, tmp_path: Path):
    """A step may run for hours: every CHECKPOINT_EVERY_S (set to 1 s here) what changed is committed and handed
    back, so a lost sandbox costs the branch at most that much — here while the clarifier waits for its answer."""
    import os
    import sys
    import time

    from flower.testing import Rule, ScriptedModel, say, tool
    from sandbox.testing import ASK, BRIEF, CLARIFIER, answer, prepare

    rules = [Rule(tool(ASK, {"question": "等一会儿?"}), system=CLARIFIER),
             Rule(say(BRIEF), system=CLARIFIER, result="好")]
    with ScriptedModel(rules) as model:
        layout, _ = prepare(git_workspace, tmp_path / "runs", RUN, model, ask="长步骤", options={"clarify_only": True})
        env = {"PATH": os.environ["PATH"], "HOME": str(layout.home), "FLOWER_ENV": str(layout.env_file),
               "FLOWER_CHECKPOINT_EVERY_S": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "sandbox.entrypoint", str(layout.spec_file)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 90
            while not list(layout.questions.glob("*.json")) and time.monotonic() < deadline:
                time.sleep(0.1)
            (layout.workspace / "half.txt").write_text("done so far\n")  # work in the middle of the step
            while not layout.bundle.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert layout.bundle.exists(), "no checkpoint while the step ran"
            events = [json.loads(x) for x in layout.events.read_text().splitlines()]
            periodic = [e for e in events if e["kind"] == "checkpoint" and e["text"].startswith("periodic:")]
            assert periodic and periodic[0]["text"] == "periodic:确认需求", events[-5:]
            assert "half.txt" in _git(layout.workspace, "show", "--stat", periodic[0]["payload"]["commit"])
            assert not [e for e in events if e["kind"] == "result"], "handed back before the step ended"
            answer(layout.mailbox, next(layout.questions.glob("*.json")).stem, "好")
            assert proc.wait(90) == 0, proc.stderr.read() if proc.stderr else ""
        finally:
            proc.kill()

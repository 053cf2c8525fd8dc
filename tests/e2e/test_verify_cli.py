"""The judge with the team's check, through the real CLI: a work step guarded by ``with_goal`` and wrapped by
``sandbox.verify.verified``, in a git repository whose ``python3 -m unittest`` fails until calc.py is fixed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flower.core.agent import AgentSpec
from flower.core.channel import HumanChannel
from flower.core.events import Event
from flower.core.resilience import Resilience
from flower.core.runtime import Runtime
from flower.docs import Goal
from flower.testing import Rule, say, tool
from flower.workflow import VERDICT_KEY, Step, Workflow, with_goal
from sandbox.verify import verified

pytestmark = pytest.mark.cli

FAST = Resilience(base_delay=0.01, max_delay=0.05, probe_interval=0.05, max_offline_wait=5)
SPEC = AgentSpec("工人", "", allowed_tools=["Write"], workbench=False)
GOAL = "## 目标\n修好 add\n## 检查清单\n1. 单元测试通过"
CMD = "python3 -m unittest"
BUGGY, FIXED = "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n"
TEST = ("import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
JUDGE = "第 {n} 轮工作结束了"


def team_repo(path: Path) -> Path:
    """A team's repository with one failing unit test (calc.add subtracts)."""
    path.mkdir(parents=True)
    (path / "calc.py").write_text(BUGGY)
    (path / "test_calc.py").write_text(TEST)
    for args in (["init", "-q", "-b", "main"], ["add", "."],
                 ["-c", "user.email=t@flower.invalid", "-c", "user.name=t", "commit", "-qm", "calc"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    return path


async def _run(ws: Path, tmp_path: Path, rounds: int) -> tuple[dict[str, object], list[Event]]:
    Goal.parse(GOAL).write(tmp_path / "目标.md")
    rt = Runtime(workspace=ws, run_dir=tmp_path / "runs", resilience=FAST)
    step = with_goal(Step("工作", SPEC, "fix calc"), HumanChannel(timeout_s=0), goal_path=tmp_path / "目标.md",
                     rounds=rounds)
    events: list[Event] = []
    ctx = await Workflow([verified(step, CMD, worktree=ws, scratch=tmp_path / "bench")]).run(rt, on_event=events.append)
    ctx["labels"] = [(r.step, r.ok) for r in rt.results]
    return ctx, [e for e in events if e.kind == "verify"]


async def test_a_failing_check_is_not_achieved_though_the_judge_says_so(tmp_path, scripted):
    ws = team_repo(tmp_path / "repo")
    rules = [Rule(say("looked again, all good"), prompt="fix calc", user="exited 1"),
             Rule(say("done, tests pass"), prompt="fix calc"),
             Rule(say("## 结论\n达成\n## 理由\n看着都好"), prompt="工作结束了", repeat=True)]
    with scripted(rules) as model:
        ctx, checks = await _run(ws, tmp_path, rounds=2)
    assert model.unmatched == [], [(r.prompt[-300:], r.user[-300:], r.system[:80]) for r in model.unmatched]
    assert ctx["labels"] == [("工作", True), ("工作·判定#1", True), ("工作#round2", True), ("工作·判定#2", True)]
    assert ctx["_failed_at"] == "工作", "the judge said 达成 twice; the check failed twice"
    assert [(e.text, e.payload["exit_code"], e.payload["passed"]) for e in checks] == \
        [(f"verify `{CMD}` exited 1", 1, False)] * 2
    assert "FAILED (failures=1)" in str(checks[0].payload["tail"]) and "AssertionError: -1 != 5" in checks[0].text + \
        str(checks[0].payload["tail"])
    judged = [r for r in model.conversation if "工作结束了" in r.prompt]
    assert len(judged) == 2 and all(f"verify `{CMD}` exited 1" in r.prompt and "<检查>" in r.prompt for r in judged)
    back = next(r for r in model.conversation if "exited 1" in r.user and r.prompt.endswith("fix calc"))
    assert "检查没有通过" in back.user and "FAILED (failures=1)" in back.user, "the failing tail went back to the work"
    verdict = ctx[VERDICT_KEY]
    assert verdict.state == "not_yet" and verdict.failed[0] == f"verify `{CMD}` exited 1"
    assert "裁判的结论:达成" in verdict.reason and "看着都好" in verdict.reason
    assert (ws / "calc.py").read_text() == BUGGY and not (ws / "__pycache__").exists(), "checked in a copy"


async def test_a_passing_check_is_evidence_and_the_judge_still_judges(tmp_path, scripted):
    ws = team_repo(tmp_path / "repo")
    rules = [Rule(tool("Write", {"file_path": str(ws / "calc.py"), "content": FIXED}), prompt="fix calc"),
             Rule(say("fixed add"), prompt="fix calc", result="calc.py"),
             Rule(say("## 结论\n未达成\n## 理由\n还要一个回归说明"), prompt=JUDGE.format(n=1)),
             Rule(say("added the note"), prompt="fix calc", user="还要一个回归说明"),
             Rule(say("## 结论\n达成\n## 理由\n测试通过"), prompt=JUDGE.format(n=2))]
    with scripted(rules) as model:
        ctx, checks = await _run(ws, tmp_path, rounds=3)
    assert model.unmatched == [] and "_failed_at" not in ctx
    assert ctx["labels"] == [("工作", True), ("工作·判定#1", True), ("工作#round2", True), ("工作·判定#2", True)]
    assert [(e.payload["exit_code"], e.payload["passed"]) for e in checks] == [(0, True), (0, True)]
    assert "Ran 1 test" in str(checks[0].payload["tail"]) and "OK" in str(checks[0].payload["tail"])
    assert all(f"verify `{CMD}` exited 0" in r.prompt for r in model.conversation if "工作结束了" in r.prompt)
    verdict = ctx[VERDICT_KEY]
    assert verdict.achieved and f"verify `{CMD}` exited 0" in verdict.reason and "测试通过" in verdict.reason


async def test_a_judge_that_cannot_verify_asks_nobody_while_the_check_fails(tmp_path, scripted):
    """"Cannot verify here" puts the question to a person; with a failing check there is nothing to ask."""
    ws = team_repo(tmp_path / "repo")
    rules = [Rule(say("done"), prompt="fix calc"),
             Rule(say("## 结论\n无法验证\n## 理由\n这里跑不了测试"), prompt=JUDGE.format(n=1))]
    with scripted(rules) as model:
        ctx, checks = await _run(ws, tmp_path, rounds=1)
    assert model.unmatched == [], [(r.prompt[-300:], r.user[-300:], r.system[:80]) for r in model.unmatched]
    assert ctx["_failed_at"] == "工作" and "_aborted" not in ctx, "nobody was asked (an unanswered ask aborts)"
    assert ctx[VERDICT_KEY].state == "not_yet" and "裁判的结论:无法验证" in ctx[VERDICT_KEY].reason
    assert [e.payload["exit_code"] for e in checks] == [1]

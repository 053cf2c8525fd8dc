"""The goal guardian through the real CLI: what a failed judge run and a failed round of work come to."""

from __future__ import annotations

from pathlib import Path

import pytest

from flower.core.agent import AgentSpec
from flower.core.channel import HumanChannel
from flower.core.resilience import Resilience
from flower.core.runtime import Runtime
from flower.docs import Goal
from flower.testing import Rule, fail, say, tool
from flower.workflow import ROUND_KEY, Step, Workflow, with_goal

pytestmark = pytest.mark.cli

FAST = Resilience(base_delay=0.01, max_delay=0.05, probe_interval=0.05, max_offline_wait=5)
SPEC = AgentSpec("工人", "", allowed_tools=["Read"], workbench=False)
GOAL = "## 目标\n做 X\n## 检查清单\n1. a.txt 存在"


async def _guarded(ws: Path, tmp_path: Path) -> dict[str, object]:
    Goal.parse(GOAL).write(tmp_path / "目标.md")
    rt = Runtime(workspace=ws, run_dir=tmp_path / "runs", resilience=FAST)
    step = with_goal(Step("工作", SPEC, "do it"), HumanChannel(timeout_s=0), goal_path=tmp_path / "目标.md", rounds=2)
    ctx = await Workflow([step]).run(rt)
    ctx["labels"] = [(r.step, r.ok) for r in rt.results]
    return ctx


async def test_a_judge_run_that_failed_is_no_verdict_whatever_it_said_first(workspace, tmp_path, scripted):
    """The judge wrote "达成" and then its run failed: that text is no verdict, the work goes another round."""
    rules = [Rule(say("work 2"), user="裁判这一轮出错了"),
             Rule(say("work 1"), prompt="do it"),
             Rule(fail(401), prompt="第 1 轮工作结束了", result="", repeat=True),
             Rule(tool("Read", {"file_path": str(workspace / "a.txt")}, text="## 结论\n达成\n## 理由\n看着都好"),
                  prompt="第 1 轮工作结束了"),
             Rule(say("## 结论\n达成"), prompt="第 2 轮工作结束了")]
    with scripted(rules) as model:
        ctx = await _guarded(workspace, tmp_path)
    assert ctx["labels"] == [("工作", True), ("工作·判定#1", False), ("工作#round2", True), ("工作·判定#2", True)]
    assert ctx["工作"] == "work 2" and ctx[ROUND_KEY] == 2 and "_failed_at" not in ctx
    assert model.unmatched == []


async def test_a_round_of_work_that_failed_continues_its_session_with_the_resume_prompt(workspace, tmp_path,
                                                                                          scripted):
    """No verdict for a round whose work broke: the same session goes on with the runtime's resume prompt."""
    rules = [Rule(say("work done"), user=FAST.resume_prompt),
             Rule(fail(401), prompt="do it", repeat=True),
             Rule(say("## 结论\n达成"), prompt="第 1 轮工作结束了")]
    with scripted(rules) as model:
        ctx = await _guarded(workspace, tmp_path)
    assert ctx["labels"] == [("工作", False), ("工作#round2", True), ("工作·判定#1", True)]
    work = [x for x in model.conversation if "do it" in x.prompt]
    assert work[-1].user == FAST.resume_prompt and work[-1].session == work[0].session, "resumed, not restarted"
    assert ctx["工作"] == "work done" and ctx[ROUND_KEY] == 1

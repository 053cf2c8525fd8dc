"""The goal guardian: a judge freezes a checkable goal, and after every round of work a fresh,
independent judge says whether it was reached — anything short of a clear yes goes back to work.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.agent import AgentSpec
from ..core.channel import HumanChannel
from ..core.events import Event
from ..core.roles import judge
from ..core.runtime import Runtime, StepResult
from ..docs.goal import Goal
from ..docs.verdict import NOT_YET, Verdict
from .base import Ctx, OnFail, Step, StepAbort, _maybe

__all__ = ["goal_step", "with_goal", "GOAL_KEY", "VERDICT_KEY", "ROUND_KEY", "EVIDENCE_KEY", "Evidence",
           "VERIFY_PROMPT", "EVIDENCE_PROMPT", "SET_GOAL_PROMPT", "NO_BRIEF", "ACCEPT", "AMEND", "DISAGREE"]

GOAL_KEY = "_goal"
"""ctx key of the frozen ``Goal`` (``ctx[goal step name]`` holds its prompt block)."""
VERDICT_KEY = "_verdict"
"""ctx key of the latest round's ``Verdict``."""
ROUND_KEY = "_goal_rounds"
"""ctx key: how many verdict rounds the guarded step has had (it restarts at that step's first attempt)."""
EVIDENCE_KEY = "_evidence"
"""ctx key: an ``Evidence`` found outside the work this round, set before the guard's gate runs; taken by it once."""


@dataclass(frozen=True)
class Evidence:
    """What a check run outside the work found this round (e.g. the team's test command, run in a copy of the
    worktree): the judge reads it beside the report, the verdict's reason carries it, and while it has not
    ``passed`` the round is not achieved, whatever the judge says — nobody is asked "cannot verify" then either."""

    summary: str
    """One line: what ran and how it ended (``verify `pytest -q` exited 1``)."""
    detail: str = ""
    """The output's tail."""
    passed: bool = False

    def block(self) -> str:
        return f"{self.summary}\n```\n{self.detail.strip()}\n```" if self.detail.strip() else self.summary

SET_GOAL_PROMPT = (
    "下面是已经和需求方确认过的需求。请为它设定目标:先看清楚你所在的环境能验证什么,"
    "然后回复恰好两节:## 目标 和 ## 检查清单。清单每一条都必须能当场验证;"
    "这个环境验证不了的条目,在末尾标注 [此环境无法验证:原因]。\n\n{brief}"
)
"""What the goal-setting judge is sent; ``{brief}`` is the brief's prompt block."""

VERIFY_PROMPT = """\
第 {round} 轮工作结束了。你没有参与这轮工作,现在独立判定它是否达成了目标。

{goal}

干活一方的汇报如下。它只是线索,不是证据,默认不相信"已经完成":
<汇报>
{report}
</汇报>

逐条核对检查清单:看实际交付物(文件、能运行的程序、命令的真实输出),不看源码像不像对。
回复恰好三节:
## 结论
达成 / 未达成 / 无法验证,三者之一
## 理由
## 未通过
"""
"""The verdict round's prompt; placeholders ``{round}``, ``{goal}`` (goal block), ``{report}``."""

EVIDENCE_PROMPT = """\


下面是这一轮结束后,在工作区的一份副本里实际运行检查命令的结果。这是证据,不是汇报:
<检查>
{evidence}
</检查>"""
"""Follows the goal block in the verdict round's prompt when the round has ``Evidence``; placeholder ``{evidence}``."""

ACCEPT = "接受这个结果,就这样往下走"
AMEND = "修改目标"
DISAGREE = "裁判判错了,这个环境能验证,接着干"
"""The three options put to the person when the judge says the goal cannot be verified here."""

_NO_GOAL = "## 目标\n(没有冻结的目标:按任务本身和交付物判断)"
NO_BRIEF = "(没有确认书)"
"""What the goal-setting judge reads in place of the brief when ``ctx[brief_key]`` is missing."""
_LABELS = {"achieved": "达成", "not_yet": "未达成", "unreachable": "无法验证"}
_AMBIGUOUS = "裁判没有给出明确的结论(达成 / 未达成 / 无法验证),按未达成处理:请把交付物和验证证据摆清楚。"


def goal_step(
    channel: HumanChannel,
    *,
    goal_path: str | Path,
    brief_key: str = "确认需求",
    name: str = "设定目标",
    spec: AgentSpec | None = None,
    instructions: str = "",
    always_set: bool = False,
    on_fail: OnFail = "stop",
    retries: int = 0,
    **spec_kw: Any,
) -> Step:
    """A Step where a judge reads ``ctx[brief_key]`` and freezes goal + checklist to ``goal_path``.

    Skipped when a complete goal is on disk (it is still put into the context) unless
    ``always_set``. Without a brief in the context the judge reads ``(没有确认书)``. No
    resume_prompt: setting a goal always resends the whole brief. Pass ``can_run=True`` through
    ``spec_kw`` to let the judge run commands while looking around. ``spec`` defaults to
    ``judge(name, channel, instructions=..., **spec_kw)``.
    """
    path = Path(goal_path)
    agent = spec if spec is not None else judge(name, channel, instructions=instructions, **spec_kw)

    def inject(ctx: Ctx, goal: Goal) -> None:
        ctx[GOAL_KEY] = goal
        ctx[name] = goal.prompt_block()

    def when(ctx: Ctx) -> bool:
        if always_set:
            return True
        goal = Goal.load(path)
        if goal is not None and goal.complete():
            inject(ctx, goal)
            return False
        return True

    def prompt(ctx: Ctx) -> str:
        brief = str(ctx.get(brief_key) or "").strip()
        return SET_GOAL_PROMPT.format(brief=brief or NO_BRIEF)

    def gate(result: StepResult, ctx: Ctx) -> bool:
        goal = Goal.parse(result.text)
        if not goal.complete():
            return False
        goal.write(path)
        inject(ctx, goal)
        emit = ctx.get("_on_event")
        if goal.unverifiable and emit:  # their fate is sealed now, before a round of work is paid for
            text = (f"{name}:检查清单里有 {len(goal.unverifiable)}/{len(goal.checks)} 条在此环境无法验证,"
                    f"判定时它们只会得到「无法验证」;现在改目标还来得及({path})")
            emit(Event("task", text, payload={"unverifiable": goal.unverifiable, "total": len(goal.checks),
                                              "path": str(path)}))
        return True

    def reduce(result: StepResult, ctx: Ctx) -> str:
        goal = ctx.get(GOAL_KEY)
        return goal.prompt_block() if isinstance(goal, Goal) else result.text

    return Step(name, agent, prompt, retries=retries, gate=gate, on_fail=on_fail, when=when, reduce=reduce)


def with_goal(
    step: Step,
    channel: HumanChannel,
    *,
    goal_path: str | Path,
    spec: AgentSpec | None = None,
    rounds: int = 3,
    instructions: str = "",
    can_run: bool = False,
    name: str | None = None,
    **spec_kw: Any,
) -> Step:
    """Guard ``step`` with an independent judge after every round; not reached → back to work.

    Returns ``replace(step, retries=max(0, rounds - 1), gate=..., on_reject=...)``: every other
    field (resume_prompt and when above all) survives. The step's own gate, if any, runs first and a
    False from it skips the judge (then the step's own on_reject answers). A rejected round
    continues the same work session with the verdict's feedback (label ``name#roundN``); a round
    whose work itself failed has no verdict and continues its session with the runtime's resume
    prompt. The judge is a fresh session each round named ``<label>#<round>`` (label: ``name`` or
    ``<step>·判定``), so it never enters the lineage. ``ctx[ROUND_KEY]`` restarts at the step's
    first attempt; ``ctx[VERDICT_KEY]`` is the latest verdict. An ``Evidence`` in ``ctx[EVIDENCE_KEY]`` (a check
    run outside the work, put there before this gate runs) is shown to the judge and carried in the verdict's reason;
    one that did not pass makes the round not achieved whatever the judge said.
    """
    path = Path(goal_path)
    label = name or f"{step.name}·判定"
    judger = spec if spec is not None else judge(label, channel, instructions=instructions, can_run=can_run,
                                                 **spec_kw)
    inner_gate, inner_reject = step.gate, step.on_reject

    async def gate(result: StepResult, ctx: Ctx) -> bool:
        ctx.pop(VERDICT_KEY, None)
        evidence = ctx.pop(EVIDENCE_KEY, None)
        if result.step == step.name:  # the step's first attempt: its rounds start again
            ctx[ROUND_KEY] = 0
        rt = ctx.get("_runtime")
        if not isinstance(rt, Runtime):
            raise StepAbort("拿不到 Runtime,无法判定目标(ctx['_runtime'] 里没有);不能当作已达成")
        if inner_gate is not None and not await _maybe(inner_gate(result, ctx)):
            return False
        ctx[ROUND_KEY] = n = ctx.get(ROUND_KEY, 0) + 1
        goal = _current_goal(ctx, path)
        shown = goal.prompt_block() if goal.complete() else _NO_GOAL
        if isinstance(evidence, Evidence):
            shown += EVIDENCE_PROMPT.format(evidence=evidence.block())
        ask = VERIFY_PROMPT.format(round=n, goal=shown, report=result.text.strip() or "(没有汇报)")
        vr = await rt.run(judger, ask, step_name=f"{label}#{n}", on_event=ctx.get("_on_event"))
        verdict = Verdict.parse(vr.text if vr.ok else "")
        ctx[VERDICT_KEY] = verdict
        if isinstance(evidence, Evidence):
            if not evidence.passed:
                _overruled(verdict, evidence)
                return False
            verdict.reason = f"{verdict.reason}\n\n{evidence.block()}".strip()
        if verdict.achieved:
            return True
        if not verdict.unreachable:
            if not verdict.state:
                why = f"裁判这一轮出错了({vr.error}),没有给出结论,按未达成处理。" if not vr.ok else _AMBIGUOUS
                verdict.reason = f"{verdict.reason}\n\n{why}".strip()
            return False
        return await _ask_person(channel, verdict, goal, path, ctx)

    def on_reject(result: StepResult, ctx: Ctx) -> str | Awaitable[str]:
        if not result.ok:  # the work itself broke (no verdict this round): pick up where it stopped
            rt = ctx.get("_runtime")
            return rt.resilience.resume_prompt if isinstance(rt, Runtime) else ""
        verdict = ctx.get(VERDICT_KEY)
        if isinstance(verdict, Verdict):
            return verdict.feedback()
        return inner_reject(result, ctx) if inner_reject is not None else ""

    return replace(step, retries=max(0, rounds - 1), gate=gate, on_reject=on_reject)


def _overruled(verdict: Verdict, evidence: Evidence) -> None:
    """A check that failed outweighs whatever the judge said: not achieved, the check's output leading the reason."""
    said = _LABELS.get(verdict.state, "没有明确结论")
    verdict.reason = (f"{evidence.block()}\n\n检查没有通过,这一轮不能算达成(裁判的结论:{said})。\n\n"
                      f"{verdict.reason}").strip()
    verdict.failed.insert(0, evidence.summary)
    verdict.state = NOT_YET


def _current_goal(ctx: Ctx, path: Path) -> Goal:
    """A complete goal in the context, else the one on disk, else an empty one."""
    goal = ctx.get(GOAL_KEY)
    if isinstance(goal, Goal) and goal.complete():
        return goal
    return Goal.load(path) or Goal()


async def _ask_person(channel: HumanChannel, verdict: Verdict, goal: Goal, path: Path, ctx: Ctx) -> bool:
    """The judge says it cannot be verified here: only a person can say what happens next."""
    lines = ["独立裁判判定:目标在当前环境下无法验证(或无法达成)。"]
    if verdict.reason.strip():
        lines.append(f"理由:{verdict.reason.strip()}")
    if verdict.failed:
        lines.append("涉及的检查:" + ";".join(verdict.failed))
    lines.append("怎么办?")
    answer = await channel.ask("\n".join(lines), [ACCEPT, AMEND, DISAGREE])
    if answer.state != "answered":
        raise StepAbort(f"裁判判定无法验证,而且没有人回答({answer.state});再转一轮只会白花钱,停下")
    if answer.choice == 0:
        return True
    if answer.choice == 1:
        again = await channel.ask("新的目标是什么?直接写一句话或几条要求:它会追加在原目标后面(标为「已修改」),"
                                  "之后的判定以它为准。")
        if again.state != "answered" or not again.text.strip():
            raise StepAbort(f"要修改目标,但没有收到新的目标({again.state});停下")
        new = goal.amend(again.text)
        new.write(path)
        ctx[GOAL_KEY] = new
        verdict.reason = f"{verdict.reason}\n\n人修改了目标,以新目标为准:\n{new.prompt_block()}".strip()
        return False
    said = answer.text if answer.choice is None else DISAGREE
    verdict.reason = f"{verdict.reason}\n\n人不同意「无法验证」这个判定:{said}\n请按人的意见继续,做完先自己验证。".strip()
    return False

"""clarify_step: ask until the requirement is clear, then freeze it as a brief every later step reads.

The questions and answers stay in the clarifier's own session: the next step is a
fresh session that receives only the brief, never that exchange.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..core.agent import AgentSpec
from ..core.channel import HumanChannel
from ..core.roles import clarify
from ..core.runtime import StepResult
from ..docs.brief import Brief
from .base import Ctx, OnFail, Step, _text

__all__ = ["clarify_step", "BRIEF_KEY", "MISSING_KEY", "CLARIFY_RESUME"]

BRIEF_KEY = "_brief"
"""ctx key of the frozen ``Brief`` object (``ctx[step name]`` holds its prompt block)."""
MISSING_KEY = "_brief_missing"
"""ctx key of the sections the last reply left empty; gone once the brief is complete."""
CLARIFY_RESUME = (
    "继续刚才没完成的需求确认——不要从头再来。已经问过、答过的不要再问,也不要把原始诉求当成新任务重新开始;"
    "还没弄清楚的接着问,问清楚后按要求给出恰好四节:目标、验收标准、边界、未知与假设。"
)
"""Sent when an interrupted clarification session is continued in a new process."""


def clarify_step(
    channel: HumanChannel,
    *,
    brief_path: str | Path,
    prompt: str | Callable[[Ctx], str],
    name: str = "确认需求",
    spec: AgentSpec | None = None,
    instructions: str = "",
    always_ask: bool = False,
    on_fail: OnFail = "stop",
    retries: int = 0,
    **spec_kw: Any,
) -> Step:
    """A Step that clarifies before anything is touched, then freezes the brief to ``brief_path``.

    Skipped (``when`` is False) when a complete brief is already on disk — but that brief is
    still put into the context, or nothing downstream would have a requirement. ``always_ask``
    clarifies anyway. ``spec`` defaults to ``clarify(name, channel, instructions=..., **spec_kw)``.
    """
    path = Path(brief_path)
    agent = spec if spec is not None else clarify(name, channel, instructions=instructions, **spec_kw)

    def inject(ctx: Ctx, brief: Brief) -> None:
        ctx[BRIEF_KEY] = brief
        ctx[name] = brief.prompt_block()
        ctx.pop(MISSING_KEY, None)

    def when(ctx: Ctx) -> bool:
        if always_ask:
            return True
        brief = Brief.load(path)
        if brief is not None and brief.complete():
            inject(ctx, brief)
            return False
        return True

    def gate(result: StepResult, ctx: Ctx) -> bool:
        brief = Brief.parse(result.text)
        if not brief.complete():
            ctx[MISSING_KEY] = brief.missing()
            return False
        # Words the person typed while the questions were still going were appended to a
        # file that held no brief yet: keep them below the frozen brief instead of losing them.
        earlier = Brief.load(path)
        added = path.read_text(encoding="utf-8") if earlier is not None and not earlier.complete() else ""
        brief.write(path)
        if added.strip():
            with open(path, "a", encoding="utf-8") as f:
                f.write("\n" + added.strip() + "\n")
        inject(ctx, brief)
        return True

    def reduce(result: StepResult, ctx: Ctx) -> str:
        """The brief, not the raw reply: the model may have slipped extra things into that."""
        brief = ctx.get(BRIEF_KEY)
        return brief.prompt_block() if isinstance(brief, Brief) else result.text

    def ask(ctx: Ctx) -> str:
        """A retry starts over: tell it which sections were missing last time."""
        text = _text(prompt, ctx)
        missing = ctx.get(MISSING_KEY)
        if missing:
            text += f"\n\n(上一次的回复缺了这几节:{'、'.join(missing)}。这次务必给全四节。)"
        return text

    return Step(name, agent, ask, retries=retries, gate=gate, on_fail=on_fail, when=when,
                resume_prompt=CLARIFY_RESUME, reduce=reduce)

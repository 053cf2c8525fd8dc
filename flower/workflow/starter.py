"""starter_flow: the three steps a bare ``flower`` runs — clarify → set the goal → work under the
goal guardian — and wake_state, the read-only look at a folder before deciding to run there.

Where things live is decided once, in ``starter_paths``: the workbench is ``<ws>/.flower`` (with
isolation ``<ws>.parent/.flower-<ws.name>``, outside the repository), and the brief, the goal and
the Q&A log sit in its ``notes/`` — out of the user's tree, and listed in the index every agent sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..core.channel import HumanChannel
from ..core.errors import ConfigError
from ..core.events import Event
from ..core.lineage import Lineage
from ..core.roles import coordinator, worker
from ..core.runtime import StepResult
from ..core.workbench import Workbench
from ..docs.brief import Brief
from .base import Ctx, Step, Workflow
from .clarify import clarify_step
from .goal import goal_step, with_goal
from .paths import StarterPaths, is_git_repo, starter_paths, wake_state

__all__ = ["starter_flow", "asked_in", "wake_state", "starter_paths", "StarterPaths", "WORK_STEP", "WAKE_LABEL"]

WORK_STEP = "工作"
WAKE_LABEL = "唤醒时追加"
NO_ASK = "要给一句诉求,例如 flower '帮我做一个 X'"

_CLARIFY_PROMPT = (
    "需求方的原话:\n{ask}\n\n"
    "动手之前先把需求问清楚:用提问工具一次问一个具体的问题,问到清楚为止;然后给出四节。"
)


def asked_in(prompt: str) -> str | None:
    """The person's words in a clarifier's prompt ``_CLARIFY_PROMPT`` made (None for any other text): its inverse,
    kept beside it, so a scripted clarifier (``flower demo``) never guesses by paragraphs."""
    head, tail = _CLARIFY_PROMPT.split("{ask}")
    start, end = prompt.find(head), prompt.rfind(tail)
    return prompt[start + len(head):end].strip() if start != -1 and end >= start + len(head) else None


_WORK_PROMPT = (
    "把上面的需求做成。活一律用 Agent 工具派给 coder 子代理(run_in_background 设为 false),"
    "读它的报告再决定下一步。需求全文在 `{brief}`{goal}。"
    "全部做完、核对过之后给出最终答复:做了什么、交付物在哪、还有什么没验证。"
)
_RESUME_PROMPT = (
    "[接着做] 这一步上次在中途停了(进程被结束或机器重启)。先看清现状:工作台、已经交付的东西;"
    "当时在跑的子代理已经不在了,没交回报告的活要重新派。然后把剩下的做完,最后照常给出最终答复。"
)
_SAID = "## 需求方刚补充的话(已追加进需求,与旧内容冲突时以此为准)\n{said}"


def starter_flow(
    ask: str,
    *,
    workspace: str | Path = ".",
    run_dir: str | Path = "runs",
    new: bool = False,
    isolate: bool = False,
    clarify_only: bool = False,
    goal: bool = True,
    rounds: int = 3,
    judge_can_run: bool = False,
    max_asks: int | None = None,
    timeout_s: float | None = 1800.0,
    instructions: str = "",
    worker_prompt: str = "你负责实现。每改一处就跑一次验证,别攒到最后。",
    brief_name: str = "需求.md",
    goal_name: str = "目标.md",
    log_name: str = "问答记录.md",
) -> Workflow:
    """Assemble clarify → set goal → work (coordinator + one ``coder`` worker, judged every round).

    The brief, the goal and the Q&A log live in ``<workbench.notes>/`` (see ``starter_paths``).
    A complete brief on disk makes this a wake-up: nothing is asked again and every step picks up
    its earlier session. A sentence given at a wake-up lands in three places — appended to the
    brief once (when the run starts), the goal set again from it, and handed to the coordinator —
    since missing any one of them silently loses it. ``new`` starts over: the lineage, the brief
    and the goal are moved together (never deleted) into ``<run_dir>/archive/<time>/`` when the
    flow is built. ``clarify_only`` returns the clarify step alone; ``goal=False`` puts no goal
    guard on the work. ``instructions`` go to the clarifier. Raises ValueError, before anything is
    spent, for ``isolate`` outside a git repository and for an empty ``ask`` that is not a wake-up;
    ``run()`` raises it for a Runtime whose run_dir is not this ``run_dir``.
    """
    paths = starter_paths(workspace, run_dir=run_dir, isolate=isolate, brief_name=brief_name,
                          goal_name=goal_name, log_name=log_name)
    if isolate and not is_git_repo(paths.workspace):
        raise ConfigError(f"isolate=True needs a git repository, and {paths.workspace} is not one: "
                          "run `git init` there (and commit), or drop isolation", setting="isolate")
    said = (ask or "").strip()
    brief = None if new else Brief.load(paths.brief)
    woke = brief is not None and brief.complete()
    if not woke and not said:
        raise ConfigError(NO_ASK, setting="ask")
    fresh_word = woke and bool(said)
    if new and any(p.exists() for p in (paths.lineage, paths.brief, paths.goal)):
        Lineage.open(paths.run_dir, paths.workspace).archive(paths.run_dir / "archive", extra=[paths.brief, paths.goal])

    ch = HumanChannel(log_path=paths.log, amend_path=paths.brief, max_asks=max_asks, timeout_s=timeout_s)
    wb = Workbench(paths.workspace, home=paths.workbench)
    coder = worker("实现者:写代码、改文件、跑验证,按四节汇报", worker_prompt, isolate=isolate)
    lead = coordinator("协调者", "", {"coder": coder}, channel=ch)

    clarify = clarify_step(ch, brief_path=paths.brief, prompt=_CLARIFY_PROMPT.format(ask=said or "(见需求文件)"),
                           instructions=instructions, always_ask=new, retries=1)
    steps: list[Step] = [clarify]
    if not clarify_only:
        names = [clarify.name]
        if goal:
            setter = goal_step(ch, goal_path=paths.goal, brief_key=clarify.name, always_set=new or fresh_word,
                               retries=1, can_run=judge_can_run)
            steps.append(setter)
            names.append(setter.name)
        where = f",目标与检查清单在 `{paths.goal}`" if goal else ""
        tail = _WORK_PROMPT.format(brief=paths.brief, goal=where)
        extra = _SAID.format(said=said) if fresh_word else ""
        work = Step(WORK_STEP, lead, _work_prompt(names, extra, tail),
                    resume_prompt=_work_prompt(names[1:] if fresh_word else [], extra, _RESUME_PROMPT, first=True))
        if goal:
            work = with_goal(work, ch, goal_path=paths.goal, rounds=rounds, can_run=judge_can_run)
        steps.append(work)
    return _Starter(steps, name="starter", channel=ch, workbench=wb, run_dir=paths.run_dir,
                    said=said if fresh_word else "")


@dataclass
class _Starter(Workflow):
    """The starter Workflow: before its first step it checks the runtime and records the wake-up sentence."""

    run_dir: Path | None = None
    said: str = ""

    async def run(self, runtime: Any, *, on_event: Callable[[Event], None] | None = None,
                  on_step: Callable[[Step, StepResult], None] | None = None) -> Ctx:
        """Refuse a Runtime keeping its runs elsewhere (before anything is written), then run the steps."""
        rt_dir = getattr(runtime, "run_dir", None)
        if self.run_dir is not None and rt_dir is not None and Path(rt_dir).resolve() != self.run_dir:
            raise ConfigError(f"the Runtime keeps its runs in {rt_dir} but starter_flow was built with "
                              f"run_dir={self.run_dir}: pass the same run_dir to both, or continuity is lost",
                              setting="run_dir")
        if self.said and self.channel is not None:  # once: a wake-up repeating the same words does not pile up
            self.channel.amend(self.said, label=WAKE_LABEL)
        return await super().run(runtime, on_event=on_event, on_step=on_step)


def _work_prompt(keys: list[str], extra: str, tail: str, *, first: bool = False) -> Callable[[Ctx], str]:
    """The coordinator's prompt: the blocks earlier steps left in ctx, the wake-up sentence, the ask."""

    def render(ctx: Ctx) -> str:
        blocks = [str(ctx[k]).strip() for k in keys if ctx.get(k)]
        parts = [tail, *blocks, extra] if first else [*blocks, extra, tail]
        return "\n\n".join(p for p in parts if p)

    return render

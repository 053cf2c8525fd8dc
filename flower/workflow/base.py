"""Step and Workflow: steps run in order, pass state through one dict, and stop early on purpose.

A Step is a declaration, not a function: what runs is ``Runtime.run(step.spec,
prompt, ...)``. The Workflow owns everything around that call — which session a
step starts from (its own earlier one across processes, another step's, or a
fresh one), how a rejected attempt comes back, what lands in the context, and
when the flow stops.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from collections.abc import Awaitable
from typing import Any, Callable

from ..core.agent import AgentSpec
from ..core.events import Event, OnEvent
from ..core.lineage import Lineage
from ..core.runtime import Runtime, StepResult
from ..core.workbench import Workbench

__all__ = ["Ctx", "Step", "Workflow", "StepAbort", "ON_FAIL"]

Ctx = dict[str, Any]
"""The context every step reads and writes: ``ctx[step name]`` is a step's output; keys starting
with ``_`` belong to the framework (see ``Workflow.run``)."""

ON_FAIL = ("stop", "continue", "skip")
"""What a step that did not pass does to the flow.

* ``"stop"`` — the flow ends here: ``ctx["_stopped"] = name``, later steps never run.
* ``"continue"`` — the last attempt is taken as it is: ``ctx[name]`` gets its reduced output and
  the flow goes on (use it for best-effort steps whose output is still worth reading).
* ``"skip"`` — the flow goes on as if the step had not run: ``ctx[name]`` is left unset, so a
  later step's ``when`` can test ``name in ctx``.

Every failed step is also listed in ``ctx["_failed"]``.
"""


class StepAbort(Exception):
    """Raised by a gate: stop this step now — another round would not help either.

    Returning False means "not this time, go another round"; raising this ends the retry loop at
    once (remaining retries unused), sets ``ctx["_aborted"] = str(exc)`` and follows ``on_fail``.
    """


def render(value: str | Callable[[Ctx], str], ctx: Ctx) -> str:
    """A prompt given as text or as a function of the context."""
    return value(ctx) if callable(value) else value


@dataclass
class Step:
    """A step's declaration; what runs is ``Runtime.run(step.spec, prompt, ...)``.

    ``when`` false → skipped. ``gate`` (sync or async) judges a successful run; False → another
    attempt while ``retries`` last, ``StepAbort`` → stop now. ``on_reject`` makes that attempt
    continue the rejected session with its return value ("" or no session → start over).
    ``resume_from`` starts from another step's session (``fork`` to branch it off);
    ``resume_prompt`` replaces the prompt when continuing this step's own session from an earlier
    process; ``reduce`` decides what lands in ``ctx[name]`` (default: the result text). The
    object is never modified by a run, so it can run again.
    """

    name: str
    spec: AgentSpec
    prompt: str | Callable[[Ctx], str]

    resume_from: str | None = None
    fork: bool = False

    retries: int = 0
    gate: Callable[[StepResult, Ctx], bool | Awaitable[bool]] | None = None
    on_fail: str = "stop"
    when: Callable[[Ctx], bool] | None = None
    on_reject: Callable[[StepResult, Ctx], str] | None = None
    resume_prompt: str | Callable[[Ctx], str] | None = None
    reduce: Callable[[StepResult, Ctx], str] | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("Step needs a non-empty name")
        if self.name.startswith("_"):
            raise ValueError(f"Step name {self.name!r} starts with '_': those ctx keys belong to the framework")
        if "#" in self.name:
            raise ValueError(f"Step name {self.name!r} contains '#': it marks retry labels (name#round2)")
        if self.on_fail not in ON_FAIL:
            raise ValueError(f"Step {self.name!r}: on_fail must be one of {', '.join(ON_FAIL)}, not {self.on_fail!r}")
        if self.retries < 0:
            raise ValueError(f"Step {self.name!r}: retries must be >= 0, not {self.retries}")

    def label(self, attempt: int) -> str:
        """What the manifest shows for an attempt: ``name``, ``name#round2`` (on_reject) or ``name#retry1``."""
        if attempt == 0:
            return self.name
        return f"{self.name}#round{attempt + 1}" if self.on_reject else f"{self.name}#retry{attempt}"


@dataclass
class Workflow:
    """Steps in order over one context; ``continuous`` reattaches steps to an earlier process's sessions."""

    steps: list[Step]
    name: str = "workflow"
    context: Ctx = field(default_factory=dict)
    channel: Any = None
    workbench: Any = None
    continuous: bool = True

    async def run(
        self,
        runtime: Runtime,
        *,
        on_event: Callable[[Event], None] | None = None,
        on_step: Callable[[Step, StepResult], None] | None = None,
    ) -> Ctx:
        """Run the steps in order and return the context (``self.context``, updated in place).

        Private keys written: ``_runtime``, ``_on_event``, ``_channel``, ``_workbench``,
        ``_workflow`` (this name), ``_results`` ({name: StepResult of the last attempt}),
        ``_sessions`` ({name: session_id}), ``_step`` / ``_attempt`` / ``_label`` (what is running),
        ``_woke`` (wake-ups so far, from the lineage: 0 on a fresh run, N on the N-th run that
        reattached to an earlier process's sessions), ``_skipped`` (names ``when`` turned down),
        ``_failed`` (names that did not pass), ``_stopped`` (the step that ended the flow, else
        None) and ``_aborted`` (the last StepAbort message).

        The channel and workbench are lent to the runtime for the run (interrupts, guards) and
        given back afterwards. ``Event("step", <name>, payload={"index", "total", "resumed",
        "woke"})`` marks each step's start (index from 0, woke = ``ctx["_woke"]``); a step ``when``
        turned down gets the same with ``"skipped": True``. Sessions are always remembered in
        ``<run_dir>/lineage.json``; with ``continuous`` they are also looked up there, so a new
        process continues them.
        """
        ctx = self.context
        ctx.setdefault("_results", {})
        ctx.setdefault("_sessions", {})
        ctx.setdefault("_skipped", [])
        ctx.setdefault("_failed", [])
        ctx["_stopped"] = None
        wb = self.workbench
        if wb is True:
            wb = Workbench(runtime.workspace)
        saved = runtime.channel, runtime.workbench
        if self.channel is not None:
            runtime.channel = self.channel
        if isinstance(wb, Workbench):
            runtime.workbench = wb
        ctx.update(_runtime=runtime, _on_event=on_event, _channel=self.channel,
                   _workbench=runtime.workbench, _workflow=self.name)
        lineage = Lineage.open(runtime.run_dir, runtime.workspace)
        waking = self.continuous and any(s.name in lineage.steps for s in self.steps)
        ctx["_woke"] = lineage.bump() if waking else 0
        try:
            for i, step in enumerate(self.steps):
                result = await self._run_step(i, step, ctx, runtime, lineage, on_event)
                if result is None:
                    continue
                if on_step:
                    on_step(step, result)
                if ctx["_stopped"]:
                    break
        finally:
            runtime.channel, runtime.workbench = saved
        return ctx

    async def _run_step(self, i: int, step: Step, ctx: Ctx, runtime: Runtime, lineage: Lineage,
                        on_event: OnEvent | None) -> StepResult | None:
        """One step, all its attempts; None when ``when`` turned it down."""
        total, name = len(self.steps), step.name
        ctx["_step"] = name
        if step.when is not None and not step.when(ctx):
            ctx["_skipped"].append(name)
            _emit(on_event, "step", name, index=i, total=total, resumed=False, woke=ctx["_woke"], skipped=True)
            return None

        def fresh() -> tuple[str, str | None, bool]:
            """Attempt 0 without continuity, and every retry that starts over."""
            source = ctx["_sessions"].get(step.resume_from) if step.resume_from else None
            if step.resume_from and source is None and self.continuous:
                source = lineage.lookup(step.resume_from)
            return render(step.prompt, ctx), source, step.fork if source else False

        earlier = lineage.lookup(name) if self.continuous and name not in ctx["_sessions"] else None
        if earlier:  # continuity: this step had a session in an earlier process
            again = step.resume_prompt if step.resume_prompt is not None else step.prompt
            prompt_cur, resume_cur, fork_cur = render(again, ctx), earlier, False
        else:
            prompt_cur, resume_cur, fork_cur = fresh()
        _emit(on_event, "step", name, index=i, total=total, resumed=resume_cur is not None, woke=ctx["_woke"])

        def remember(session_id: str) -> None:  # as soon as the CLI names it: a kill -9 keeps it
            lineage.remember(name, session_id)

        attempt = 0
        while True:
            label = step.label(attempt)
            ctx["_attempt"], ctx["_label"] = attempt, label
            previous = runtime.on_session
            runtime.on_session = remember
            try:
                result = await runtime.run(step.spec, prompt_cur, step_name=label, resume=resume_cur,
                                           fork=fork_cur, on_event=on_event)
            finally:
                runtime.on_session = previous
            ctx["_results"][name] = result
            if result.session_id:
                ctx["_sessions"][name] = result.session_id
                lineage.remember(name, result.session_id)
            passed, aborted = result.ok, False
            if passed and step.gate is not None:
                try:
                    verdict = step.gate(result, ctx)
                    if inspect.isawaitable(verdict):
                        verdict = await verdict
                    passed = bool(verdict)
                except StepAbort as e:
                    ctx["_aborted"], passed, aborted = str(e), False, True
            if passed or aborted or attempt >= step.retries:
                break
            back = step.on_reject(result, ctx) if step.on_reject is not None else ""
            if back and result.session_id:
                prompt_cur, resume_cur, fork_cur = back, result.session_id, False
            else:
                prompt_cur, resume_cur, fork_cur = fresh()
            attempt += 1

        if passed:
            ctx[name] = step.reduce(result, ctx) if step.reduce is not None else result.text
            return result
        ctx["_failed"].append(name)
        if step.on_fail == "stop":
            ctx["_stopped"] = name
        elif step.on_fail == "continue":
            ctx[name] = step.reduce(result, ctx) if step.reduce is not None else result.text
        return result


def _emit(on_event: OnEvent | None, kind: str, text: str, **payload: Any) -> None:
    """Event("step") carries the step name as its text; the payload is exactly what the contract lists."""
    if on_event is not None:
        on_event(Event(kind, text, payload=payload))  # type: ignore[arg-type]

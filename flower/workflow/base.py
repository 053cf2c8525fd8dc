"""Step and Workflow: steps run in order, pass state through one dict, and stop early on purpose.

A Step is a declaration, not a function: what runs is ``Runtime.run(step.spec,
prompt, ...)``. The Workflow owns everything around that call — which session a
step starts from (its own earlier one across processes, another step's, or a
fresh one), how a rejected attempt comes back, what lands in the context, and
when the flow stops.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Literal

from ..core.agent import AgentSpec
from ..core.channel import HumanChannel
from ..core.errors import StepAbort, StepError
from ..core.events import Event, OnEvent
from ..core.lineage import Lineage
from ..core.outcome import Call
from ..core.runtime import Runtime, StepResult
from ..core.workbench import Workbench
from .state import RunState

__all__ = ["Ctx", "Step", "Workflow", "StepAbort", "ON_FAIL", "OnFail"]

Ctx = dict[str, Any]
"""The context every step reads and writes: ``ctx[step name]`` is a step's output; keys starting
with ``_`` belong to the framework (see ``Workflow.run``)."""

OnFail = Literal["stop", "skip", "continue"]
ON_FAIL: tuple[OnFail, ...] = ("stop", "skip", "continue")
"""What a step that did not pass does to the flow.

* ``"stop"`` (default) — ``ctx["_failed_at"] = name`` and the whole flow ends here.
* ``"skip"`` — the flow goes on and ``ctx[name]`` is not written: a later ``lambda ctx: ctx[name]``
  raises KeyError, a later ``when`` can test ``name in ctx``.
* ``"continue"`` — ``ctx[name] = result.text`` (the last attempt's raw text, not ``reduce``) and the
  flow goes on with an incomplete result.

Pass or fail, ``ctx["_results"][name]`` is the last attempt's StepResult.
"""


def _text(value: str | Callable[[Ctx], str], ctx: Ctx) -> str:
    """A prompt given as text or as a function of the context."""
    return value(ctx) if callable(value) else value


async def _maybe(value: Any) -> Any:
    """``gate``, ``when`` and ``on_reject`` may be sync or async."""
    return await value if inspect.isawaitable(value) else value


@dataclass
class Step:
    """A step's declaration; what runs is ``Runtime.run(step.spec, prompt, ...)``.

    ``when`` false → the whole step is skipped (no result, nothing in ``_results``). ``gate`` judges
    a successful run, exactly once per attempt; False → another attempt while ``retries`` last,
    ``StepAbort`` → stop now. ``on_reject`` makes the next attempt continue the rejected session
    with its return value ("" or no session → start over). ``resume_from`` starts from another
    step's session (``fork`` to branch it off; a step with no session there → ValueError).
    ``resume_prompt`` replaces the prompt when the step continues its own session (continuity).
    ``reduce`` (sync) decides what lands in ``ctx[name]`` (default: the result text). ``gate``,
    ``when`` and ``on_reject`` may be async. The object is never modified by a run, so it can run
    again.
    """

    name: str
    spec: AgentSpec
    prompt: str | Callable[[Ctx], str]

    resume_from: str | None = None
    fork: bool = False

    retries: int = 0
    gate: Callable[[StepResult, Ctx], bool | Awaitable[bool]] | None = None
    on_fail: OnFail = "stop"
    when: Callable[[Ctx], bool | Awaitable[bool]] | None = None
    on_reject: Callable[[StepResult, Ctx], str | Awaitable[str]] | None = None
    resume_prompt: str | Callable[[Ctx], str] | None = None
    reduce: Callable[[StepResult, Ctx], str] | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise StepError("Step needs a non-empty name")
        if self.name.startswith("_"):
            raise StepError(f"Step name {self.name!r} starts with '_': those ctx keys belong to the framework", step=self.name)
        if "#" in self.name:
            raise StepError(f"Step name {self.name!r} contains '#': it marks retry labels (name#round2)", step=self.name)
        if self.on_fail not in ON_FAIL:
            raise StepError(f"Step {self.name!r}: on_fail must be one of {', '.join(ON_FAIL)}, not {self.on_fail!r}", step=self.name)
        if self.retries < 0:
            raise StepError(f"Step {self.name!r}: retries must be >= 0, not {self.retries}", step=self.name)

    def render(self, ctx: Ctx, *, resuming: bool = False) -> str:
        """The prompt to send: ``resume_prompt`` when resuming and there is one, else ``prompt``."""
        if resuming and self.resume_prompt is not None:
            return _text(self.resume_prompt, ctx)
        return _text(self.prompt, ctx)

    def label(self, attempt: int) -> str:
        """What the manifest shows for an attempt: ``name``, ``name#round2`` (on_reject) or ``name#retry1``."""
        if attempt == 0:
            return self.name
        return f"{self.name}#round{attempt + 1}" if self.on_reject else f"{self.name}#retry{attempt}"

    def output(self, result: StepResult, ctx: Ctx) -> str:
        """What a passed attempt leaves in ``ctx[name]``; ``reduce`` must be synchronous."""
        if self.reduce is None:
            return result.text
        out = self.reduce(result, ctx)
        if inspect.isawaitable(out):
            close = getattr(out, "close", None)
            if close:
                close()  # never awaited: do not leave a "coroutine was never awaited" warning behind
            raise TypeError(f"Step {self.name!r}: reduce must be a plain (sync) function; gate, when and "
                            "on_reject may be async, reduce may not")
        return out


@dataclass
class Workflow:
    """Steps in order over one context; ``continuous`` (default) reattaches steps to their earlier sessions."""

    steps: list[Step]
    name: str = "workflow"
    context: Ctx = field(default_factory=dict)
    channel: HumanChannel | None = None
    workbench: Workbench | bool | None = None
    continuous: bool = True
    state: RunState | None = field(default=None, init=False, repr=False, compare=False)
    """The typed state of the latest ``run`` (the private ctx keys mirror it)."""

    async def run(
        self,
        runtime: Runtime,
        *,
        on_event: Callable[[Event], None] | None = None,
        on_step: Callable[[Step, StepResult], None] | None = None,
    ) -> Ctx:
        """Run the steps in order and return the context (``self.context``, updated in place).

        The framework's own state is ``self.state`` (a typed ``RunState``); the private keys below
        mirror it for gates and callers written against the reference. Private keys written: ``_runtime`` (gates dispatch agents through it), ``_on_event``,
        ``_sessions`` ({step: session_id}, kept with setdefault), ``_results`` ({step: StepResult of
        the last attempt}), ``_lineage`` (only when ``continuous`` and the runtime has a run_dir and a
        workspace), ``_woke`` (``lineage.bump()``: 1 on the first run in a place, N on the N-th; 0
        without a lineage), ``_aborted`` (the last StepAbort message) and ``_failed_at`` (the step
        that failed with on_fail="stop"). ``_aborted`` and ``_failed_at`` are cleared when a run starts.

        With ``continuous`` the lineage ``<run_dir>/lineage.json`` is read first and every session it
        names that ``runtime.has_session`` still finds is put into ``ctx["_sessions"]``: a step with
        a live session continues it with ``step.render(ctx, resuming=True)`` — ``resume_from=None``
        does not mean a fresh session then (a step's own live session also takes precedence over its
        ``resume_from``). ``continuous=False`` neither reads nor writes the lineage.

        ``Event("step", <name>, payload={"index", "total", "resumed", "woke"})`` marks the start of
        each step that runs. The channel's ``on_event`` is wired to ``on_event`` for the run when it
        is None (and unwired afterwards); the channel and a Workbench are lent to the runtime for the
        run (interrupts, guards, the index) through ``Runtime.lend``, and the lineage's listener
        around each ``runtime.run`` only: scoped loans, undone however the run ends.
        """
        ctx = self.context
        state = self.state = RunState.adopt(ctx, runtime, on_event)
        if self.continuous:
            lineage = Lineage.open(runtime.run_dir, runtime.workspace)
            for step_name, sid in lineage.steps.items():
                if step_name not in state.sessions and runtime.has_session(sid):
                    state.sessions[step_name] = sid
            state.lineage, state.woke = lineage, lineage.bump()
        state.publish(ctx)

        ch, wb = self.channel, self.workbench
        if wb is True:
            wb = Workbench(runtime.workspace)
        wired = ch is not None and on_event is not None and ch.on_event is None
        if wired:
            assert ch is not None
            ch.on_event = on_event
        try:
            with runtime.lend(channel=ch, workbench=wb if isinstance(wb, Workbench) else None):
                for i, step in enumerate(self.steps):
                    result = await self._run_step(i, step, ctx, state)
                    if result is None:
                        continue
                    if on_step:
                        on_step(step, result)
                    if state.failed_at == step.name:
                        break
        finally:
            if wired and ch is not None and ch.on_event is on_event:
                ch.on_event = None
        return ctx

    async def _run_step(self, i: int, step: Step, ctx: Ctx, state: RunState) -> StepResult | None:
        """One step, all its attempts; None when ``when`` turned it down."""
        name, runtime, lineage, on_event = step.name, state.runtime, state.lineage, state.on_event
        if step.when is not None and not await _maybe(step.when(ctx)):
            return None

        def fresh() -> Call:
            """Attempt 0 without a session of its own, and every retry that starts over."""
            if not step.resume_from:
                return Call(step.render(ctx))
            source = state.sessions.get(step.resume_from)
            if not source:
                raise StepError(f"Step {name!r} resumes from {step.resume_from!r}, which has no session (it did "
                                "not run, or produced none): put that step before it, or drop resume_from", step=name)
            return Call(step.render(ctx), source, step.fork)

        own = state.sessions.get(name) if lineage is not None else None
        # continuity: a step that already has a live session continues it
        call = Call(step.render(ctx, resuming=True), own) if own else fresh()
        _emit(on_event, "step", name, index=i, total=len(self.steps), resumed=call.resume is not None,
              woke=state.woke)

        # the lineage learns a session as soon as the CLI names it: a kill -9 keeps it
        remember = partial(lineage.remember, name) if lineage is not None else None
        attempt = 0
        while True:
            with runtime.lend(on_session=remember):
                result = await runtime.run(step.spec, call.prompt, step_name=step.label(attempt), resume=call.resume,
                                           fork=call.fork, on_event=on_event)
            state.results[name] = result
            if result.session_id:
                state.sessions[name] = result.session_id
                if lineage is not None:
                    lineage.remember(name, result.session_id)
            passed, aborted = result.ok, False
            if passed and step.gate is not None:
                try:
                    passed = bool(await _maybe(step.gate(result, ctx)))
                except StepAbort as e:
                    state.aborted, passed, aborted = str(e), False, True
                    state.publish(ctx)
            if passed or aborted or attempt >= step.retries:
                break
            back = await _maybe(step.on_reject(result, ctx)) if step.on_reject is not None else ""
            call = Call(back, result.session_id) if back and result.session_id else fresh()
            attempt += 1

        if passed:
            ctx[name] = step.output(result, ctx)
        elif step.on_fail == "stop":
            state.failed_at = name
            state.publish(ctx)
        elif step.on_fail == "continue":
            ctx[name] = result.text
        return result


def _emit(on_event: OnEvent | None, kind: str, text: str, **payload: Any) -> None:
    """Event("step") carries the step name as its text; the payload is exactly what the contract lists."""
    if on_event is not None:
        on_event(Event(kind, text, payload=payload))

"""Runtime: one verb, `run` a step — retries, human interrupts and handoffs all happen inside it."""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Generic, Protocol, TypeVar

from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKClient,
    ResultMessage,
    SystemMessage,
    project_key_for_directory,
)

from ..docs.handoff import HANDOFF_PROMPT, Handoff, degraded
from ..store.ephemeral import EphemeralPolicy
from ..store.prune import PrunePolicy, PruningSessionStore
from ..store.trim import TrimPolicy
import structlog

from . import manifest
from .errors import ManifestError
from .agent import AgentSpec, CompactPolicy, HandoffPolicy, build_options
from .credentials import check_credentials, load_dotenv
from .events import Event, OnEvent, normalize
from .outcome import (
    INTERRUPT_NOTE,
    Call,
    Continue,
    Failed,
    Finish,
    HandOff,
    HandoffDue,
    Outcome,
    StopCause,
    outcome_of,
    what_next,
)
from .guard import merge_hooks, whitelist_guard, workbench_hooks
from .resilience import Resilience
from .spare import Spare
from .workbench import Workbench


_log = structlog.get_logger("flower.runtime")
T = TypeVar("T")
_KEY_LATER: ContextVar[bool] = ContextVar("flower_key_later", default=False)


@contextmanager
def key_later() -> Iterator[None]:
    """Runtimes made inside do not look for a key: a warm sandbox's is made before its run — and its key — exists
    (its CLI spawned ahead is given a stand-in, ``prespawn(env=)``). Not a constructor keyword: the reference's
    ``Runtime`` signature stays as it is."""
    token = _KEY_LATER.set(True)
    try:
        yield
    finally:
        _KEY_LATER.reset(token)


class _Question(Protocol):
    @property
    def id(self) -> str: ...


class InterruptSource(Protocol):
    """What the runtime needs of a channel: the person's interrupts, and the questions to settle then."""

    def pending(self) -> Sequence[_Question]: ...

    def decline(self, ask_id: str, reason: str = "") -> bool: ...

    def take_interrupt(self) -> str | None: ...


class _Lent(Generic[T]):
    """A Runtime attribute a Workflow may lend for a while (``Runtime.lend``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, rt: Runtime, owner: type) -> T:
        value: T = getattr(rt._binding, self.name)
        return value

    def __set__(self, rt: Runtime, value: T) -> None:
        changes: dict[str, Any] = {self.name: value}
        rt._own = replace(rt._own, **changes)


@dataclass(frozen=True)
class _Binding:
    channel: InterruptSource | None = None
    workbench: Workbench | None = None
    on_session: Callable[[str], None] | None = None


@dataclass
class StepResult:
    step: str
    session_id: str | None = None
    ok: bool = False
    cost_usd: float = 0.0
    num_turns: int = 0
    text: str = ""
    error: str | None = None
    started_at: float = 0.0
    ended_at: float = 0.0
    attempts: int = 1
    errors: list[str] = field(default_factory=list)
    resumed: bool = False
    retired: list[str] = field(default_factory=list)
    context: int = 0

    @property
    def duration_s(self) -> float:
        return round(self.ended_at - self.started_at, 2) if self.ended_at else 0.0


P = TypeVar("P", TrimPolicy, EphemeralPolicy, Resilience, HandoffPolicy)


def _policy(value: P | bool, cls: type[P]) -> P:
    """`True` → defaults, `False`/None → disabled (``enabled=False``), an instance → itself."""
    if isinstance(value, cls):
        return value
    return cls() if value else cls(enabled=False)


class Runtime:
    """The execution core: a workspace, a session store, a workbench and the policies, behind one verb.

    ``run`` runs one step of an agent and returns its ``StepResult``; retries, continuing after a
    person's interrupt, and handing off to a fresh session when the context fills all happen inside
    that one call. Everything else — which step comes next, what passes between steps — is a
    ``Workflow``'s.

    The store is fixed: ``PruningSessionStore(<run_dir>/sessions.db, workspace=..., policy=trim,
    ephemeral=ephemeral, prune=PrunePolicy(keep_denials=...))``; to use another, assign ``rt.store``.
    Credentials are checked here, not at the first ``run``: without them the constructor raises
    (``CredentialsError``, a ``RuntimeError``) and leaves no folder behind.

        rt = Runtime(workspace=".", run_dir="runs")
        result = await rt.run(worker_spec, "make the tests pass", step_name="fix")
        if not result.ok:
            print(result.error, result.errors)
    """

    INTERRUPTED = "interrupted-by-human"
    HANDOFF_DUE = "context-full-handoff"
    INTERRUPT_NOTE = INTERRUPT_NOTE

    def __init__(
        self,
        *,
        workspace: str | Path,
        run_dir: str | Path = "runs",
        portable: bool = True,
        trim: TrimPolicy | bool = False,
        ephemeral: EphemeralPolicy | bool = True,
        keep_denials: int = 1,
        workbench: Workbench | bool = False,
        spill_threshold: int | None = 4000,
        resilience: Resilience | bool = True,
        handoff: HandoffPolicy | bool = True,
    ) -> None:
        # Credentials first: a Runtime that cannot run leaves no empty folders behind (under ``key_later``: later).
        load_dotenv()
        if not _KEY_LATER.get():
            check_credentials()
        self.workspace = Path(workspace).resolve()
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.portable = portable
        self.spill_threshold = spill_threshold
        self.trim = _policy(trim, TrimPolicy)
        self.ephemeral = _policy(ephemeral, EphemeralPolicy)
        self.resilience = _policy(resilience, Resilience)
        self.handoff = _policy(handoff, HandoffPolicy)
        self.store = PruningSessionStore(self.run_dir / "sessions.db", workspace=self.workspace, policy=self.trim,
                                         ephemeral=self.ephemeral, prune=PrunePolicy(keep_denials=keep_denials))
        if workbench is True:
            workbench = Workbench(self.workspace, home=self.run_dir / "workbench")
        self._own = _Binding(workbench=workbench or None)
        self._lent: ContextVar[_Binding | None] = ContextVar(f"flower.runtime.{id(self)}", default=None)
        if self._own.workbench:
            self._own.workbench.refresh()
        self.results: list[StepResult] = []
        self.run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        # Observers, instead of subclassing: each run() tells on_attempt its step name when it starts
        # and on_result its StepResult when it ends (not when it is cancelled).
        self.on_attempt: list[Callable[[str], None]] = []
        self.on_result: list[Callable[[StepResult], None]] = []
        self._interrupt_words: str | None = None
        self._interrupt = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._current: StepResult | None = None
        self._ctx, self._warned = 0, False
        self._spare: Spare | None = None

    # -- what a Workflow lends for a while: its channel, its workbench, a session listener ----------
    @property
    def _binding(self) -> _Binding:
        return self._lent.get() or self._own

    # ``channel``: polled for the person's interrupts (a Workflow lends its own for its run);
    # ``on_session``: told each session id as soon as the CLI names it (lent around each run).
    # Reading gives what is lent in this context, else the runtime's own; assigning sets its own.
    channel: _Lent[InterruptSource | None] = _Lent()
    workbench: _Lent[Workbench | None] = _Lent()
    on_session: _Lent[Callable[[str], None] | None] = _Lent()

    @contextmanager
    def lend(self, *, channel: InterruptSource | None = None, workbench: Workbench | None = None,
             on_session: Callable[[str], None] | None = None) -> Iterator[None]:
        """Within the block (and the tasks it starts), use these instead of the runtime's own.

        Only what is given replaces; nesting adds to the outer loan. Scoped to the current
        context, so it is undone however the block ends and two concurrent workflows sharing
        a runtime never see each other's channel.
        """
        b = self._binding
        token = self._lent.set(_Binding(channel=channel if channel is not None else b.channel,
                                        workbench=workbench if workbench is not None else b.workbench,
                                        on_session=on_session if on_session is not None else b.on_session))
        try:
            yield
        finally:
            self._lent.reset(token)

    # -- the one verb ------------------------------------------------------
    async def run(
        self,
        spec: AgentSpec,
        prompt: str,
        *,
        step_name: str | None = None,
        resume: str | None = None,
        fork: bool = False,
        resume_at: str | None = None,
        on_event: OnEvent | None = None,
    ) -> StepResult:
        """Run ``spec`` on ``prompt`` until the step is done, and return its accounting.

        A run is one step, not one CLI session: it may take several attempts and sessions. It
        ends on success; or on a failure that is final (not retryable, ``resilience`` off, or
        ``max_attempts`` used up); or when handoffs reach ``handoff.max_generations``. Along the
        way a person's interrupt (``interrupt()`` or the channel's mailbox) continues the same
        session with their words and does not count as an attempt; a full context writes a handoff
        document (``Event("handoff")``: near / writing / done) and goes on in a fresh session
        from it; a retryable failure waits for the network and resumes the session with
        ``resilience.resume_prompt``.

        ``step_name`` (default ``spec.name``) names the step in the manifest and in events;
        ``resume`` / ``fork`` / ``resume_at`` choose the session the first attempt starts from;
        ``on_event`` sees every event of the step's own turns (not of the handoff turn).

        Returns the ``StepResult``: ``ok``, the final ``text`` or ``error``, the last
        ``session_id`` (``retired`` lists those handed off), ``cost_usd`` / ``num_turns``
        summed over attempts, ``attempts`` counted, every error seen in ``errors``. It is also
        appended to ``self.results`` and written to ``<run_dir>/manifest.json`` however the run
        ends, cancellation included. A failing step does not raise: it returns ``ok=False``.

            r = await rt.run(spec, "write a.txt", step_name="write")
            assert r.ok, r.error
            again = await rt.run(spec, "now b.txt", resume=r.session_id)
        """
        name = step_name or spec.name
        for watch in list(self.on_attempt):
            watch(name)
        self._ctx, self._warned = 0, False
        self._loop = asyncio.get_running_loop()
        out = self._current = StepResult(step=name, started_at=time.time())
        call = Call(prompt, resume, fork, resume_at)
        last_session: str | None = None
        attempt = 1  # counted attempts: interrupts and handoffs do not count
        try:
            while True:
                r, outcome = await self._attempt_outcome(spec, call, name, on_event)
                out.cost_usd += r.cost_usd
                out.num_turns += r.num_turns
                out.text, out.error, out.ok = r.text, r.error, r.ok
                out.errors += r.errors
                last_session = r.session_id or last_session
                if isinstance(outcome, (Failed, HandoffDue)) and r.error not in (self.INTERRUPTED, self.HANDOFF_DUE) \
                        and r.error not in r.errors:
                    out.errors.append(r.error or "unknown error")
                move = what_next(outcome, call=call, attempt=attempt, last_session=last_session,
                                 retired=len(out.retired), resilience=self.resilience, handoff=self.handoff)
                if isinstance(move, Finish):
                    if move.error is not None:
                        out.error = move.error
                    break
                if isinstance(move, Continue):
                    call = move.call
                elif isinstance(move, HandOff):
                    doc = await self._write_handoff(spec, name, move.session_id, call.prompt, move.why, on_event)
                    out.retired.append(move.session_id)
                    call = Call(doc.prompt_block())
                    self._ctx, self._warned = 0, False
                else:
                    res = self.resilience
                    delay = res.delay_for(attempt)
                    _emit(on_event, "retry", f"第 {attempt} 次失败,{delay:.0f}s 后重试", name, attempt=attempt,
                          error=r.error, delay=round(delay, 2), session_id=last_session)
                    if not await res.wait_online():
                        out.error = f"{r.error} (offline for more than {res.max_offline_wait:.0f}s; gave up)"
                        break
                    await asyncio.sleep(delay)
                    call, attempt = move.call, move.attempt
                    out.resumed = out.resumed or move.resumed
        finally:
            out.session_id = last_session
            out.attempts = attempt
            out.context = self._ctx
            out.ended_at = time.time()
            self._current = None
            if not any(x is out for x in self.results):  # rescue() may have filed it already
                self.results.append(out)
            self._record()
        for watch_result in list(self.on_result):
            watch_result(out)
        return out

    async def _attempt_outcome(self, spec: AgentSpec, call: Call, name: str,
                               on_event: OnEvent | None) -> tuple[StepResult, Outcome]:
        """One attempt and what it came to."""
        r = await self._attempt(spec, call.prompt, name, resume=call.resume, fork=call.fork,
                                resume_at=call.resume_at, on_event=on_event)
        stop: StopCause | None = ("interrupt" if r.error == self.INTERRUPTED
                                  else "handoff" if r.error == self.HANDOFF_DUE else None)
        words: str | None = None
        if stop == "interrupt":
            words, self._interrupt_words = self._interrupt_words or "", None
        return r, outcome_of(ok=r.ok, error=r.error, errors=r.errors, session_id=r.session_id, stop=stop,
                             words=words, handoff=self.handoff.enabled)

    def _record(self) -> None:
        manifest.record(self.manifest_path, self.run_id, [asdict(x) for x in self.results])

    def interrupt(self, message: str = "") -> None:
        """Stop the running turn at a message boundary and continue its session with `message`.

        Safe from any thread (a web backend, a TUI input thread). Empty = interrupt, say nothing.
        """
        self._interrupt_words = message
        loop = self._loop
        if loop and loop.is_running():
            loop.call_soon_threadsafe(self._interrupt.set)
        else:
            self._interrupt.set()

    def rescue(self) -> None:
        """Before a forced kill (SIGHUP/SIGTERM handlers): put the step in flight in the manifest."""
        cur = self._current
        if cur is None:
            return
        cur.error, cur.ended_at = "killed-by-signal", time.time()
        if not any(x is cur for x in self.results):
            self.results.append(cur)
        try:
            self._record()
        except (OSError, ManifestError) as e:  # dying anyway: say why the row is missing, do not mask the signal
            _log.warning("runtime.rescue_failed", manifest=str(self.manifest_path), error=repr(e))

    @property
    def manifest_path(self) -> Path:
        return self.run_dir / "manifest.json"

    @property
    def project_key(self) -> str:
        """The SDK derives it from the cwd; a copied workspace no longer finds its old sessions."""
        return project_key_for_directory(self.workspace)

    def has_session(self, session_id: str) -> bool:
        return self.store.has_session(self.project_key, session_id)

    def context_of(self, session_id: str) -> int:
        return self.store.last_context(self.project_key, session_id)

    def total_cost(self) -> float:
        return round(sum(r.cost_usd for r in self.results), 4)

    def close(self) -> None:
        self.store.close()

    # -- one attempt: one CLI session ---------------------------------------
    def options(self, spec: AgentSpec, *, resume: str | None = None, fork: bool = False,
                resume_at: str | None = None) -> ClaudeAgentOptions:
        """SDK options for `spec` with every guard this runtime enforces mounted."""
        wb = self.workbench if spec.workbench else None
        guard = None if spec.delegate_only else whitelist_guard(spec.allowed_tools, role=spec.name)
        hooks = merge_hooks(
            spec.hooks,
            workbench_hooks(wb, delegate_only=spec.delegate_only, spill_threshold=self.spill_threshold,
                            agents=spec.agents, allow_glance=spec.glance) if wb else None,
            {"PreToolUse": [guard]} if guard else None,
        )
        if wb:
            wb.ensure()
        add_dirs = [str(wb.root)] if wb and wb.external else None
        options = build_options(spec, cwd=self.workspace, session_store=self.store, resume=resume, fork=fork,
                                resume_at=resume_at, portable=self.portable, add_dirs=add_dirs,
                                prelude=wb.prompt_block() if wb else "")
        options.hooks = hooks or None
        return options

    def attempt_options(self, spec: AgentSpec, *, resume: str | None = None, fork: bool = False,
                        resume_at: str | None = None) -> ClaudeAgentOptions:
        """What one attempt of ``spec`` spawns its CLI with: ``options`` and the runtime's compaction rule."""
        if self.handoff.enabled and spec.compact is None:
            # With both on, nobody could tell which one shrank the context.
            spec = replace(spec, compact=CompactPolicy("no_summary"))
        return self.options(spec, resume=resume, fork=fork, resume_at=resume_at)

    async def prespawn(self, spec: AgentSpec, *, env: Mapping[str, str] | None = None, rehearse: bool = False) -> None:
        """Spawn the CLI of ``spec``'s first attempt now, before its prompt is known (a warm sandbox does, before
        its run exists): the next attempt whose CLI would be spawned the same — options and environment — takes it
        (``flower.core.spare``); one that differs closes it, says why in a ``system`` event, and spawns its own.
        ``env``: what the run's environment is expected to hold (a warm sandbox's bridge as its base URL), given to
        this CLI alone — the process's environment stays the run's to make. ``rehearse``: its base URL answers
        requests itself until the spare is taken, so its warm-up prompt may go the whole way (``Spare``)."""
        options = self.attempt_options(spec)
        if env:
            options.env = {**options.env, **env}
        spare = Spare(options, rehearse=rehearse)
        await spare.start()
        self._spare = spare

    async def _client(self, options: ClaudeAgentOptions, name: str,
                      on_event: OnEvent | None) -> tuple[ClaudeSDKClient, bool]:
        """The attempt's client and whether it is connected already (the spare, when it fits)."""
        spare, self._spare = self._spare, None
        if spare is None:
            return ClaudeSDKClient(options), False
        why = spare.misfit(options)
        _emit(on_event, "system", "预先启动的 CLI " + ("已接手" if why is None else f"不适用,重新启动: {why}"), name,
              subtype="prespawn", taken=why is None, why=why)
        if why is None:
            return spare.take(options), True
        _log.info("runtime.respawn", step=name, why=why)
        await spare.close()
        return ClaudeSDKClient(options), False

    async def _attempt(self, spec: AgentSpec, prompt: str, name: str, *, resume: str | None, fork: bool,
                       resume_at: str | None, on_event: OnEvent | None, handing_off: bool = False) -> StepResult:
        r = StepResult(step=name, session_id=None if fork else resume)
        options = self.attempt_options(spec, resume=resume, fork=fork, resume_at=resume_at)
        stderr: list[str] = []
        options.stderr = lambda line: stderr.append(line) if len(stderr) < 200 else None
        stop: dict[str, str] = {}  # why we stopped the CLI ourselves, if we did
        self._interrupt.clear()
        client, connected = await self._client(options, name, on_event)

        async def on_person() -> None:
            # Acts at once, not at the next message: a turn blocked on a question sends none.
            await self._watch_interrupts()
            if not stop:
                stop["cause"] = self.INTERRUPTED
                # The person's words, as theirs: the CLI's own account of the cut turn is dropped below.
                _emit(on_event, "prompt", self._interrupt_words or "", name, by="person", interrupt=True)
                self._drop_open_questions()
                await client.interrupt()

        try:
            if not connected:
                await client.connect()
            watcher = asyncio.create_task(on_person())
            try:
                await client.query(prompt)
                async for msg in client.receive_response():
                    if isinstance(msg, SystemMessage) and msg.subtype == "init":
                        r.session_id = msg.data.get("session_id") or r.session_id
                        if r.session_id and self.on_session:
                            self.on_session(r.session_id)
                    elif isinstance(msg, ResultMessage):
                        r.session_id = msg.session_id or r.session_id
                        r.cost_usd, r.num_turns = msg.total_cost_usd or 0.0, msg.num_turns
                        r.ok = not msg.is_error
                        if msg.is_error:
                            r.error = "; ".join(msg.errors or []) or msg.result or msg.subtype
                        elif msg.result:
                            r.text = msg.result
                    full = False
                    for ev in normalize(msg):
                        seen = after_interrupt(ev) if stop.get("cause") == self.INTERRUPTED else ev
                        if seen is not None:
                            full = self._observe(seen, name, r, on_event) or full
                    # The handoff turn itself runs above the line by definition: never cut it.
                    if not stop and full and not handing_off:
                        stop["cause"] = self.HANDOFF_DUE
                        await client.interrupt()
            finally:
                watcher.cancel()
        except Exception as e:  # the CLI died or the SDK raised on an error result
            r.ok = False
            r.error = r.error or f"{type(e).__name__}: {e}"
            if stderr:
                r.error += " | " + " ".join(stderr[-3:])[-400:]
        finally:
            try:
                await client.disconnect()
            except Exception as e:  # noqa: BLE001 - the attempt's outcome is already decided; keep it
                _log.warning("runtime.disconnect_failed", step=name, error=repr(e))
        if stop:
            r.ok, r.error = False, stop["cause"]
        return r

    def _observe(self, ev: Event, name: str, r: StepResult, on_event: OnEvent | None) -> bool:
        """Track the context level from the main thread's usage, keep its latest text, pass the event on.

        True when this event put the level at or over the handoff line.
        """
        main = not ev.payload.get("subagent")
        full = False
        if ev.kind == "error":
            r.errors.append(ev.text)
        elif main and ev.kind == "text":
            r.text = ev.text  # the result's own text, arriving last, has the final word
        if main and ev.kind in ("text", "tool_call", "thinking") and ev.payload.get("context"):
            self._ctx = ev.payload["context"]
            if self.handoff.enabled and not self._warned and self._ctx >= self.handoff.warn_at:
                self._warned = True
                _emit(on_event, "handoff", f"上下文 {self._ctx} tokens,接近交接线 {self.handoff.at}", name,
                      phase="near", used=self._ctx, at=self.handoff.at)
            full = self.handoff.enabled and self._ctx >= self.handoff.at
        if on_event:
            on_event(ev)
        return full

    def _drop_open_questions(self) -> None:
        """Questions the interrupted turn was waiting on will never be read: settle them."""
        channel = self.channel
        if channel is None:
            return
        for a in channel.pending():
            channel.decline(a.id, "interrupted")

    async def _watch_interrupts(self) -> None:
        """Returns when the person interrupts: through `interrupt()` or the channel's mailbox."""
        channel = self.channel
        take = channel.take_interrupt if channel is not None else None
        while not self._interrupt.is_set():
            if take:
                words = take()
                if words is not None:  # "" = interrupt without saying anything
                    self._interrupt_words = words
                    return
            try:  # not wait_for: on 3.11 it swallows a cancel that meets the interrupt
                async with asyncio.timeout(0.25):
                    await self._interrupt.wait()
            except TimeoutError:
                pass

    # -- handoff -------------------------------------------------------------
    async def _write_handoff(self, spec: AgentSpec, name: str, session_id: str, task: str, why: str,
                             on_event: OnEvent | None) -> Handoff:
        """The full session writes its own handoff; if it cannot, a mechanical one stands in."""
        _emit(on_event, "handoff", "正在写交接书", name, phase="writing", session_id=session_id)
        ask = HANDOFF_PROMPT.format(used=self._ctx, window=self.handoff.window)
        # Tried even after an overflow: the CLI may still fit one turn; if not, the degraded doc stands in.
        saved = self._ctx
        r = await self._attempt(replace(spec, max_budget_usd=None), ask, name, resume=session_id, fork=False,
                                resume_at=None, on_event=None, handing_off=True)
        self._ctx = saved
        doc = Handoff.parse(r.text) if r.ok and r.text else None
        if doc is None or not doc.complete():
            doc = degraded(name, task, why=r.error or f"handoff incomplete, missing {doc.missing() if doc else 'everything'}")
        doc.step = name
        path = self._file_handoff(doc, name)
        _emit(on_event, "handoff", "交接完成" + ("(降级)" if doc.degraded else ""), name, phase="done",
              degraded=doc.degraded, path=str(path) if path else None,
              sections=[k for k in ("doing", "decided", "deadends", "next", "scene") if getattr(doc, k).strip()],
              retired=session_id)
        return doc

    def _file_handoff(self, doc: Handoff, name: str) -> Path | None:
        """<notes>/交接-<step>.md; the previous one moves to notes/archive/交接/."""
        if not self.workbench:
            return None
        notes = self.workbench.ensure().notes
        path = notes / f"交接-{name}.md"
        if path.exists():
            archive = notes / "archive" / "交接"
            archive.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
            target, n = archive / f"{name}-{stamp}.md", 1
            while target.exists():  # several handoffs within one second
                n += 1
                target = archive / f"{name}-{stamp}-{n}.md"
            shutil.move(str(path), target)
        doc.write(path)
        return path


def after_interrupt(ev: Event) -> Event | None:
    """An event of a turn the person interrupted, as the person should read it (None: not at all).

    The CLI answers an interrupt in its own words, meant for the model: a stand-in result for the call it cut
    ("The user doesn't want to proceed with this tool use … STOP what you are doing …"), a user turn
    "[Request interrupted by user for tool use]" and an ``error_during_execution`` result. None of it is a
    failure or the person's: the cut call and the turn are marked ``interrupted`` (their cost still counts),
    the CLI's note is dropped (the runtime emitted the person's own words when the interrupt landed).
    """
    if ev.kind == "prompt":
        return None
    if ev.kind == "tool_result" and ev.payload.get("is_error"):
        return replace(ev, text="", payload={**ev.payload, "is_error": False, "interrupted": True})
    if ev.kind == "result" and ev.payload.get("is_error"):
        return replace(ev, text="interrupted", payload={**ev.payload, "is_error": False, "interrupted": True})
    return ev


def _emit(on_event: OnEvent | None, kind: str, text: str, step: str, **payload: Any) -> None:
    if on_event:
        on_event(Event(kind, text, payload=payload, step=step))

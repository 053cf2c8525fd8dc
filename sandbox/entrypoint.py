"""``python -m sandbox.entrypoint SPEC_FILE``: what runs inside a run's container (and the local backend).

1. Reads the spec; the layout is where the spec file sits (``<root>/<folder>/mailbox/spec.json``). A warm
   sandbox (``FLOWER_WARM=1``, started ahead by ``sandbox.pool``) imports everything a run needs first, then
   waits for the spec to appear: nothing of the run — spec, token, tenant — exists for it before the claim.
2. Credentials come from the file ``$FLOWER_ENV`` names, through flower's ``load_dotenv``; HOME and the
   working folder are the run's own, so no host file is read (and the CLI runs with setting_sources=[]).
   They are the run's own gateway token, not the tenant's key; with ``FLOWER_GATEWAY_SOCKET`` set (a sandbox
   with no network) a loopback port is bridged to the gateway's socket and becomes ``ANTHROPIC_BASE_URL``.
3. Builds ``starter_flow(ask, workspace=<worktree>, run_dir=<run/>, isolate=True, **options)``: the
   workbench is ``<run>/.flower-<repo>`` (outside the worktree). Workers are *not* given CLI worktrees of
   their own: the run's worktree already isolates the run, and the bundled CLI puts a linked worktree's
   subagent worktrees under the *main* checkout (``<repo>/.claude/worktrees``), on branches nothing merges.
   With a verify command (``RunSpec.verify``) every round of the work runs it in a copy of the worktree before
   the judge (``sandbox/verify.py``): a ``verify`` event says how it ended, and a failure is never achieved.
4. The human channel is the mailbox folder (read-only here: the service writes it); questions go to
   ``outbox/questions/``; ``mailbox/interrupt.json`` interrupts the step in flight.
5. After every step, every ``CHECKPOINT_EVERY_S`` (300 s) while a step runs when something changed, and once more at
   the end or when stopped, the run's work is committed on its branch and handed back as ``outbox/work.bundle``
   (``sandbox.checkpoint``), with a ``checkpoint`` event.
   Every ``flower.Event`` and every audit event (guard denials, spills, isolation injections) becomes one
   JSON line of ``events.jsonl``: ``{kind, text, tool, payload, step, at}``; audit lines have
   ``kind="audit"``, ``text=<audit kind>`` and the audit fields in ``payload`` (``payload.audit`` too).
6. ``outbox/exit.json`` at the end: ``{status, error, cost_usd, steps, exit_code, ...}``.
7. A spec with ``resume`` starts a run again on its own folder, after its sandbox was lost or it was parked
   (``sandbox/resume.py``): the flow wakes up where it stood, the step in flight continuing its session, told why
   first, with the questions it left open settled; a ``system`` event ``resumed`` says so. The mailbox files it
   takes are remembered in its run dir (``.mailbox-taken``), so a resumed run takes none twice.

Exit codes: 0 succeeded, 1 failed, 2 the run could not start (spec, credentials, workspace),
3 aborted (a step gave up on purpose, e.g. nobody answered), 143 killed (SIGTERM/SIGINT/SIGHUP).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from flower.core.files import write_atomic

from .checkpoint import CheckpointError, checkpoint
from .egress import EGRESS_ENV, EGRESS_SOCKET, open_egress
from .layout import RunLayout
from .resume import ask_of, left_questions, note_of, resumed_flow, stale_locks
from .setup import SEED, plant
from .spec import RUN_OPTIONS, RunSpec, SpecError, read_spec

__all__ = ["main", "EventLog", "write_exit", "exit_document", "jsonable", "EXIT_CODES", "STATUSES"]

STATUSES = ("succeeded", "failed", "aborted", "killed")
EXIT_CODES = {"succeeded": 0, "failed": 1, "aborted": 3, "killed": 143}
CONFIG_ERROR = 2


class _Stop(Exception):
    """The run cannot start: exit.json says why, in one line, and the exit code is 2."""


# -- events.jsonl --------------------------------------------------------------------------------
def jsonable(value: Any, _depth: int = 0) -> Any:
    """``value`` with everything JSON cannot carry dropped (dict keys made strings, NaN → None)."""
    if _depth > 20:
        return None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)) or not _keep(v):
                continue
            out[str(k)] = jsonable(v, _depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [jsonable(v, _depth + 1) for v in value if _keep(v)]
    if isinstance(value, Path):
        return str(value)
    return None


def _keep(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str, dict, list, tuple, Path))


class EventLog:
    """Appends one JSON line per event; safe from any thread (audit listeners run in hook callbacks)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._f = open(fd, "a", encoding="utf-8", buffering=1)
        self.step = ""  # the runtime step in flight, for events that do not name one

    def write(self, kind: str, text: str = "", tool: str = "", payload: dict[str, Any] | None = None,
              step: str = "", at: float | None = None) -> None:
        line = {"kind": kind, "text": text, "tool": tool, "payload": jsonable(payload or {}),
                "step": step or self.step, "at": at if at is not None else time.time()}
        data = json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n"
        with self._lock:
            if self._f.closed:
                return
            self._f.write(data)
            self._f.flush()

    def event(self, ev: Any) -> None:
        """A ``flower.Event``: kind, text, tool, payload (its JSON part), step, at — never ``raw``."""
        if ev.kind == "step":
            self.step = ev.text
        self.write(str(ev.kind), ev.text, ev.tool, ev.payload, ev.step, ev.at)

    def audit(self, ev: Any) -> None:
        """A ``flower.core.audit.AuditEvent``: deny, spill, spill_failed, isolate."""
        fields = dict(ev.fields)
        self.write("audit", ev.kind, str(fields.get("tool") or ""), {"audit": ev.kind, **fields}, at=ev.at)

    def close(self) -> None:
        with self._lock:
            self._f.close()


# -- exit.json -----------------------------------------------------------------------------------
def _steps(run_dir: Path, runtime_run: str | None) -> list[dict[str, Any]]:
    """This run's manifest rows, summed up (one per step attempt the runtime recorded)."""
    from flower.core import manifest

    try:
        rows = manifest.read_rows(run_dir / "manifest.json")
    except RuntimeError:
        return []
    keep = ("step", "ok", "error", "cost_usd", "num_turns", "attempts", "session_id", "resumed", "context")
    out = []
    for r in rows:
        if runtime_run is not None and r.get("run") != runtime_run:
            continue
        row = {k: r.get(k) for k in keep}
        started, ended = r.get("started_at") or 0, r.get("ended_at") or 0
        row["duration_s"] = round(ended - started, 2) if ended and started else 0.0
        out.append(row)
    return out


def exit_document(status: str, *, error: str | None = None, cost_usd: float = 0.0,
                  steps: list[dict[str, Any]] | None = None, **extra: Any) -> bytes:
    """The bytes of an exit.json."""
    assert status in STATUSES, status
    data = {"status": status, "error": _one_line(error) if error else None, "cost_usd": round(cost_usd, 4),
            "steps": steps or [], "exit_code": extra.pop("exit_code", EXIT_CODES[status]), **extra}
    return (json.dumps(jsonable(data), ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def write_exit(path: Path, status: str, **fields: Any) -> None:
    """exit.json, written whole (temp + rename): a reader sees no file or the final one."""
    write_atomic(path, exit_document(status, **fields))


def _one_line(text: Any, limit: int = 1000) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


# -- the run ---------------------------------------------------------------------------------------
def _layout(spec_file: Path, spec: RunSpec) -> RunLayout:
    name = spec.repo_name
    if not name:  # a spec written by hand: the one folder beside it that is a git worktree
        folder = spec_file.parent.parent
        found = [p.name for p in folder.iterdir() if (p / ".git").exists() and not p.name.startswith(".")]
        if len(found) != 1:
            raise _Stop(f"cannot tell which folder beside {spec_file} is the run's worktree ({found or 'none'}): "
                        "write the spec with sandbox.spec.write_spec")
        name = found[0]
    try:
        return RunLayout.of_spec_file(spec_file, spec.run_id, name)
    except ValueError as e:
        raise _Stop(str(e)) from None


def _credentials(layout: RunLayout, ahead: _Ahead) -> None:
    """Only the file $FLOWER_ENV names: HOME and the working folder are the run's, so nothing else is there.
    The bridge a warm sandbox opened ahead serves when it leads to the socket the env file names."""
    from flower.core.credentials import check_credentials, load_dotenv

    env_file = os.environ.get("FLOWER_ENV", "")
    if not env_file or not Path(env_file).is_file():
        raise _Stop(f"no credentials: FLOWER_ENV must name the run's env file, and {env_file or 'it is not set'}"
                    f"{' is not a readable file' if env_file else ''}")
    load_dotenv(cwd=layout.dir, home=layout.home)
    socket_path = os.environ.get("FLOWER_GATEWAY_SOCKET")
    if socket_path:
        from .bridge import open_bridge

        try:
            bridge = ahead.bridge
            if bridge is None or bridge.path != Path(socket_path):
                bridge = open_bridge(socket_path)
            os.environ["ANTHROPIC_BASE_URL"] = bridge.url
        except OSError as e:
            raise _Stop(f"cannot reach the model gateway at {socket_path}: {e}") from None
    try:
        check_credentials(cwd=layout.dir, home=layout.home)
    except RuntimeError:
        raise _Stop(f"no credentials in the run's env file {env_file}: it must set ANTHROPIC_API_KEY "
                    "(or ANTHROPIC_AUTH_TOKEN / CLAUDE_CODE_OAUTH_TOKEN)") from None


def _workflow(ask: str, run_options: dict[str, Any], layout: RunLayout) -> Any:
    from flower.core.guard import isolated
    from flower.workflow import starter_flow

    options = {k: v for k, v in run_options.items() if k != "isolate" and k not in RUN_OPTIONS}
    if not layout.workspace.is_dir():
        raise _Stop(f"the run's worktree {layout.workspace} does not exist: add it before starting the run")
    try:
        wf = starter_flow(ask, workspace=layout.workspace, run_dir=layout.run_dir, isolate=True, **options)
    except ValueError as e:
        raise _Stop(str(e)) from None
    for step in wf.steps:  # the run's worktree is the isolation (see the module doc)
        for agent in (getattr(step.spec, "agents", None) or {}).values():
            isolated(agent, False)
    return wf


def _checked(wf: Any, spec: RunSpec, layout: RunLayout) -> None:
    """With a verify command, each round of the work runs it in a copy of the worktree before the judge
    (``sandbox/verify.py``); without one the flow is left as it is."""
    from flower.workflow.starter import WORK_STEP

    from .verify import verified

    if spec.verify is None:
        return
    wf.steps = [verified(s, spec.verify, worktree=layout.workspace, scratch=layout.workbench,
                         timeout_s=spec.verify_timeout_s) if s.name == WORK_STEP else s for s in wf.steps]


def commit_message(run_id: str, why: str) -> str:
    """The commit of a run's work in the run's language (its FLOWER_LANG, else its locale; the tenant's settings
    may set it): after which step (its name as the reference fixes it, glossed in English), or the run's end."""
    from flower.cli.messages import name, t

    if why.startswith(PERIODIC):
        return t("commit.periodic", run=run_id, step=name(why[len(PERIODIC):]))
    return t({"end": "commit.end", "stopped": "commit.stopped"}.get(why, "commit.step"), run=run_id, step=name(why))


class _Run:
    """One run of the entrypoint: the pieces the signal handler needs to reach."""

    def __init__(self, spec: RunSpec, layout: RunLayout, log: EventLog) -> None:
        self.spec, self.layout, self.log = spec, layout, log
        self.runtime: Any = None
        self.started = time.time()
        self.killed: str | None = None
        self._checkpointing = threading.Lock()
        self._handed: str | None = None  # the tip last handed back: a step that changed nothing hands back nothing

    def checkpoint(self, why: str) -> None:
        """Hand the work so far back (see the module doc); a failure is an event, never the run's end.
        One at a time: a step's checkpoint runs in a thread while the next step starts."""
        if not self.spec.base or not self.layout.workspace.is_dir():
            return
        with self._checkpointing:
            try:
                tip = checkpoint(self.layout.workspace, self.layout.bundle, branch=self.layout.branch,
                                 base=self.spec.base, message=commit_message(self.spec.run_id, why),
                                 changed_only=why.startswith(PERIODIC))
            except (CheckpointError, OSError, subprocess.SubprocessError) as e:
                self.log.write("system", f"checkpoint failed: {_one_line(e, 300)}",
                               payload={"subtype": "checkpoint_failed"})
                return
            if tip is None or tip == self._handed:
                return
            self._handed = tip
        self.log.write("checkpoint", why, payload={"commit": tip})

    async def _every(self, seconds: float) -> None:
        """Hand the work back every ``seconds`` while a step runs too (a commit only when something changed): what a
        lost sandbox can cost the branch is bounded by this, however long the step."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(seconds)
            await loop.run_in_executor(None, self.checkpoint, PERIODIC + (self.log.step or ""))

    def finish(self, status: str, error: str | None = None, **extra: Any) -> None:
        self.checkpoint("end" if status != "killed" else "stopped")
        rt = self.runtime
        write_exit(self.layout.exit_file, status, error=error, cost_usd=rt.total_cost() if rt else 0.0,
                   steps=_steps(self.layout.run_dir, rt.run_id if rt else None), run_id=self.spec.run_id,
                   tenant=self.spec.tenant, runtime_run=rt.run_id if rt else None, started_at=self.started,
                   ended_at=time.time(), **extra)

    def kill(self, sig: signal.Signals) -> None:
        """SIGTERM & co, as flower's own CLI does: the step in flight goes into the manifest, exit.json says
        killed, and the process ends at once. When it leads its process group (the local backend starts it
        so) the rest of the group — the CLI and what it runs — gets SIGTERM first; in a container the
        container's end takes them. The session store is SQLite, safe at any point: a re-submitted run
        continues."""
        if self.killed:
            return
        self.killed = sig.name
        try:
            if self.runtime is not None:
                self.runtime.rescue()
            self.finish("killed", f"stopped by {sig.name}")
            self.log.write("system", f"killed by {sig.name}", payload={"subtype": "killed", "signal": sig.name})
            self.log.close()
            if os.getpgrp() == os.getpid():
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                os.killpg(os.getpid(), signal.SIGTERM)
        finally:
            os._exit(EXIT_CODES["killed"])

    async def go(self, ahead: _Ahead) -> int:
        from flower.core import audit
        from flower.core.channel import MailboxAnswers
        from flower.core.runtime import Runtime

        loop = asyncio.get_running_loop()
        for name in ("SIGTERM", "SIGINT", "SIGHUP"):
            sig = getattr(signal, name)
            loop.add_signal_handler(sig, self.kill, sig)

        layout, log, resume = self.layout, self.log, self.spec.resume
        if self.spec.environment is not None and self.spec.environment.seed:  # what the team's setup installed
            planted = await asyncio.to_thread(plant, Path(SEED), layout.workspace)
            log.write("system", f"{planted} entries from the environment's setup put in the checkout",
                      payload={"subtype": "seeded", "entries": planted})
        wf = _workflow(ask_of(self.spec, layout) if resume else self.spec.ask, self.spec.options, layout)
        _checked(wf, self.spec, layout)
        if resume is not None:  # see sandbox/resume.py
            left = left_questions(layout)
            resumed_flow(wf, note_of(self.spec, left), left, layout)
            log.write("system", f"resumed in a new sandbox ({resume.cause})", payload={
                "subtype": "resumed", "cause": resume.cause, "sandboxes": resume.n + 1,
                "since_checkpoint_s": resume.since_checkpoint_s, "git_locks_removed": stale_locks(layout),
                "questions": [{"id": q.id, "answered": q.answer is not None, "timed_out": q.timed_out} for q in left]})
        wf.channel.answers = MailboxAnswers(
            layout.mailbox, poll_s=0.2, questions=layout.questions, taken=layout.run_dir / MAIL_TAKEN,
            on_error=lambda text: log.write("system", text, payload={"subtype": "mailbox_error"}))
        try:
            self.runtime = ahead.runtime or Runtime(workspace=layout.workspace, run_dir=layout.run_dir, trim=True,
                                                    handoff=True)
        except RuntimeError as e:
            raise _Stop(str(e)) from None
        # the step in flight names events that do not carry one; every finished step hands its work back
        self.runtime.on_attempt.append(lambda name: setattr(log, "step", name))
        self.runtime.on_result.append(lambda result: loop.run_in_executor(None, self.checkpoint, result.step))
        periodic = loop.create_task(self._every(CHECKPOINT_EVERY_S))
        log.write("system", "sandbox started", payload={
            "subtype": "sandbox", "run_id": self.spec.run_id, "tenant": self.spec.tenant,
            "workspace": str(layout.workspace), "workbench": str(layout.workbench), "pid": os.getpid(),
            "runtime_run": self.runtime.run_id, "prespawned": ahead.runtime is not None})
        try:
            with audit.listen(log.audit):
                ctx = await wf.run(self.runtime, on_event=log.event)
        finally:
            periodic.cancel()
            self.runtime.close()
        failed = ctx.get("_failed_at")
        if not failed:
            self.finish("succeeded")
            return 0
        result = (ctx.get("_results") or {}).get(failed)
        if ctx.get("_aborted"):
            self.finish("aborted", f"step {failed!r} gave up: {ctx['_aborted']}", failed_at=failed)
            return EXIT_CODES["aborted"]
        why = (result.error if result is not None and result.error else "") or "it did not pass its check"
        self.finish("failed", f"step {failed!r} failed: {why}", failed_at=failed)
        return EXIT_CODES["failed"]


CHECKPOINT_EVERY_S = float(os.environ.get("FLOWER_CHECKPOINT_EVERY_S") or 300)  # the work handed back mid-step too
PERIODIC = "periodic:"  # a checkpoint's ``why`` that is not a step's end
MAIL_TAKEN = ".mailbox-taken"  # in the run dir: the mailbox files taken, so a resumed run takes none twice
WAIT_EVERY_S = 1.0  # a warm sandbox looks for its spec this often even without word from inotify
IN_CREATE, IN_MOVED_TO, IN_ATTRIB = 0x100, 0x80, 0x4
WARM_REPO = "FLOWER_WARM_REPO"  # a warm sandbox's environment: the name of the checkout its slot holds
GATEWAY_SOCKET = "gateway.sock"  # in the run's gateway/ folder (service/gateway/grant.py SOCKET_NAME)
# A sandbox's CLI has no way out but the gateway: nothing but the model's traffic, for every run alike (so a CLI
# spawned ahead and the run's own see the same environment).
QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
         "DISABLE_ERROR_REPORTING": "1"}
SPECULATED_ASK = "(the run's ask, not known yet)"


def _imports() -> None:
    """What every run imports (most of a cold start), done by a warm sandbox while it waits."""
    import claude_agent_sdk  # noqa: F401 - the bulk of the import time
    import flower.core.audit  # noqa: F401
    import flower.core.channel  # noqa: F401
    import flower.core.credentials  # noqa: F401
    import flower.core.runtime  # noqa: F401
    import flower.workflow  # noqa: F401

    from . import bridge  # noqa: F401


class _Ahead:
    """What a warm sandbox readies before its run exists: where its slot holds a checkout, the bridge to the
    gateway's socket open and rehearsing (it answers requests itself until the claim), and the first step's CLI
    spawned (``Runtime.prespawn``) from the options a run with no options would have, with the bridge's stand-in
    for a key, its first prompt rehearsed. Nothing of any run is in it — no spec, no token, no tenant: the claim
    brings them. Empty for a cold start."""

    def __init__(self) -> None:
        self.runtime: Any = None
        self.bridge: Any = None

    async def ready(self, folder: Path) -> None:
        """Spawn the CLI ahead; a failure leaves the run to start its own (said on stderr, never fatal)."""
        from flower.core.runtime import Runtime, key_later

        from .bridge import open_bridge

        repo = os.environ.get(WARM_REPO, "")
        try:
            layout = RunLayout(folder.parent, folder.name, repo)
        except ValueError:
            return
        if not (layout.workspace / ".git").is_dir():
            return
        try:
            os.chdir(layout.dir)
            self.bridge = open_bridge(layout.gateway / GATEWAY_SOCKET, rehearsal=True)
            with key_later():
                runtime = Runtime(workspace=layout.workspace, run_dir=layout.run_dir, trim=True, handoff=True)
            wf = _workflow(SPECULATED_ASK, {}, layout)
            # the bridge is the base URL a run through the gateway will have: the CLI's alone, not the process's
            # (a run whose env file names another — the model itself — must keep it, and gets a CLI of its own)
            guess = {"ANTHROPIC_BASE_URL": self.bridge.url, "ANTHROPIC_API_KEY": self.bridge.stand_in}
            await runtime.prespawn(wf.steps[0].spec, env=guess, rehearse=True)
            self.runtime = runtime
        except Exception as e:  # noqa: BLE001 - a CLI started ahead is an optimisation: the run starts its own
            print(f"flower sandbox: no CLI started ahead: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)

    def claimed(self) -> None:
        """The run's env file is loaded: its bridge stops rehearsing, and the stand-in key becomes the run's token
        (a CLI spawned ahead that is taken with no token to stand for is refused by the gateway: the service always
        writes one)."""
        if self.bridge is not None:
            self.bridge.claim(os.environ.get("ANTHROPIC_API_KEY"))


def _wait_for(spec_file: Path) -> None:
    """Block until the spec appears. It is written last by the service, whole (temp + rename), and may be
    unreadable for an instant while it is handed to the run's uid."""
    watch = _inotify(spec_file.parent)
    while True:
        try:
            with open(spec_file, "rb"):
                break
        except OSError:
            pass
        if watch is None:
            time.sleep(0.01)  # no inotify here: a stat every 10 ms (about 2 % of a core)
            continue
        if select.select([watch], [], [], WAIT_EVERY_S)[0]:
            os.read(watch, 65536)
    if watch is not None:
        os.close(watch)


def _inotify(folder: Path) -> int | None:
    """An inotify fd watching ``folder`` for new, renamed-in and re-owned files; None where there is none."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(folder), IN_CREATE | IN_MOVED_TO | IN_ATTRIB) < 0:
        os.close(fd)
        return None
    return int(fd)


def _claimed(spec: RunSpec) -> None:
    """A warm sandbox's environment was made before its run existed: the run's marks and env are set now."""
    os.environ.update({"FLOWER_RUN_ID": spec.run_id, "FLOWER_TENANT": spec.tenant, **spec.env})
    os.environ.pop("FLOWER_WARM", None)


def run(spec_file: str | Path) -> int:
    """Run the spec in ``spec_file``; returns the exit code (exit.json is written in every case)."""
    return asyncio.run(_run(Path(spec_file).expanduser().resolve()))


async def _run(spec_file: Path) -> int:
    exit_file = spec_file.parent.parent / "outbox" / "exit.json"
    warm = os.environ.get("FLOWER_WARM") == "1"
    os.environ.update(QUIET)
    if os.environ.get(EGRESS_ENV) == "proxied":  # the allow-list's way out, for all the run spawns (sandbox.egress)
        os.environ.update(open_egress(spec_file.parent.parent / "gateway" / EGRESS_SOCKET))
    ahead = _Ahead()
    if warm:
        _imports()
        await ahead.ready(spec_file.parent.parent)
        await asyncio.get_running_loop().run_in_executor(None, _wait_for, spec_file)
    try:
        spec = read_spec(spec_file)
        if warm:
            _claimed(spec)
        layout = _layout(spec_file, spec)
    except (SpecError, _Stop) as e:
        write_exit(exit_file, "failed", error=str(e), exit_code=CONFIG_ERROR)
        print(f"flower sandbox: {_one_line(e)}", file=sys.stderr)
        return CONFIG_ERROR
    layout.exit_file.unlink(missing_ok=True)
    layout.ensure()
    os.chdir(layout.dir)  # ./.env of the run's folder, never the caller's
    log = EventLog(layout.events)
    state = _Run(spec, layout, log)
    try:
        try:
            _credentials(layout, ahead)
            ahead.claimed()
            return await state.go(ahead)
        except _Stop as e:
            state.finish("failed", str(e), exit_code=CONFIG_ERROR)
            print(f"flower sandbox: {_one_line(e)}", file=sys.stderr)
            return CONFIG_ERROR
        except BaseException as e:  # noqa: BLE001 - exit.json must say what happened, whatever it was
            traceback.print_exc(file=sys.stderr)
            state.finish("failed", f"{type(e).__name__}: {e}")
            return EXIT_CODES["failed"]
    finally:
        log.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m sandbox.entrypoint SPEC_FILE   (the run's mailbox/spec.json; see sandbox/spec.py)",
              file=sys.stderr)
        return CONFIG_ERROR
    return run(args[0])


if __name__ == "__main__":
    sys.exit(main())

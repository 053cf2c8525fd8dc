"""The scheduler's paths, fast: the real Scheduler, registry, tenants file, git worktrees and gateway, with
``MemoryBackend`` at the sandbox seam (a handler plays each run as the entrypoint would). The passes are driven
by hand (``start(run_loop=False)`` + ``tick``); the subprocess tests in this folder stay the integration layer."""

from __future__ import annotations

import asyncio
import http.server
import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from sandbox.backends.base import Backend
from sandbox.backends.kubernetes import KubeAPI, KubernetesBackend
from sandbox.testing import MemoryBackend, MemoryRun
from sandbox.checkpoint import checkpoint
from sandbox.errors import BackendUnavailable
from service.config import ServiceConfig
from service.gateway import Held
from service.registry import Registry, Run
from service.control.scheduler import POISON_AFTER, Scheduler
from service.wiring import Service, build
from service.tenants import Tenants
from service.gateway.wire import Usage

pytestmark = pytest.mark.asyncio


@dataclass
class World:
    root: Path
    repo: Path
    config: ServiceConfig
    registry: Registry
    backend: MemoryBackend
    service: Service

    @property
    def scheduler(self) -> Scheduler:
        return self.service.scheduler

    def submit(self, ask: str = "做一个 hello", tenant: str = "acme") -> str:
        run_id = f"20261202-000000-{secrets.token_hex(16)}"
        self.registry.runs.create(id=run_id, tenant=tenant, ask=ask, options={}, repo=str(self.repo))
        return run_id

    def row(self, run_id: str) -> Run:
        row = self.registry.runs.get(run_id)
        assert row is not None
        return row

    async def until(self, run_id: str, *statuses: str, passes: int = 50) -> Run:
        """Passes until the run's row is in one of ``statuses`` (a stop runs in the background: it gets a turn)."""
        for _ in range(passes):
            await self.scheduler.tick()
            if self.row(run_id).status in statuses:
                return self.row(run_id)
            await asyncio.sleep(0)
            for task in self.scheduler.live.stop_tasks():
                await task
        raise AssertionError(f"run {run_id} stayed {self.row(run_id).status}, not {statuses}")

    async def restarted(self) -> World:
        """The service again, over the same registry and the same engine (its runs still there)."""
        await self.scheduler.stop()
        backend = MemoryBackend(self.backend.handler, runs=self.backend.runs)
        service = build(self.config, self.registry, Tenants(self.config.tenants), backend)
        await service.scheduler.start(run_loop=False)
        return World(self.root, self.repo, self.config, self.registry, backend, service)


def tenants_file(root: Path, repo: Path, creds: Path, **extra: object) -> Path:
    lines = ["[[tenant]]", 'name = "acme"', 'token = "acme-token-0123456789"', f'repo = "{repo}"',
             f'credentials = "{creds}"', "quota = 2"] + [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    path = root / "tenants.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def make_world(tmp_path: Path, git_repo: Callable[..., Path]) -> Iterator[Callable[..., AsyncIterator[World]]]:
    made: list[Service] = []

    async def make(handler: Callable[[MemoryRun], Generator[None, None, None] | None] | None = None,
                   tenant: dict[str, object] | None = None,
                   backend: Callable[[ServiceConfig], Backend] | None = None, postgres: str = "",
                   run_loop: bool = False, **config: object) -> World:
        repo = git_repo(tmp_path / "repos" / "acme")
        creds = tmp_path / "acme.env"
        creds.write_text("ANTHROPIC_API_KEY=sk-test-not-used\n")
        config = {"poll_s": 0.05, **config}
        cfg = ServiceConfig(data_dir=str(tmp_path / "data"), backend="local", min_free_mb=0,
                            guard_canary=False,
                            tenants=str(tenants_file(tmp_path, repo, creds, **(tenant or {}))),
                            **{"gateway_process": "inside", **config})  # type: ignore[arg-type]
        cfg.data_path.mkdir(parents=True, exist_ok=True)
        cfg.runs_root.mkdir(parents=True, exist_ok=True)
        registry = Registry.postgres(postgres) if postgres else Registry(cfg.db_path)
        seam = backend(cfg) if backend is not None else MemoryBackend(handler)
        service = build(cfg, registry, Tenants(cfg.tenants), seam)
        await service.scheduler.start(run_loop=run_loop)
        made.append(service)
        return World(tmp_path, repo, cfg, registry, seam, service)  # type: ignore[arg-type]

    yield make  # type: ignore[misc]
    for service in made:  # a test that did not stop its scheduler leaves no thread renewing its leases
        service.scheduler.leases.stop()


def waits(run: MemoryRun) -> Generator[None, None, None]:
    """A run that says it started and then waits (for a stop, or for the test to ``advance`` it)."""
    run.event("step", "工作", payload={"index": 0, "total": 1})
    yield
    run.exit("succeeded", cost_usd=0.25)


async def test_a_run_is_started_followed_and_finished_from_its_exit(make_world: Callable[..., World]) -> None:
    def plays(run: MemoryRun) -> None:
        run.event("step", "工作", payload={"index": 0, "total": 1})
        run.event("result", "done", payload={"cost_usd": 0.5})
        run.exit("succeeded", cost_usd=0.5)

    w = await make_world(plays)
    run_id = w.submit()
    queue = w.service.feed.subscribe(run_id)
    row = await w.until(run_id, "succeeded")
    assert row.step == "工作" and row.claimed_cost_usd == 0.5 and row.error is None
    assert row.branch == f"flower/{run_id}" and row.base and row.token_sha256 is None
    kinds = [queue.get_nowait()[1].kind for _ in range(queue.qsize() - 1)]
    assert kinds == ["system", "step", "result"], kinds
    assert w.backend.calls[:2] == ["live", "start"] and "remove" in w.backend.calls  # recover, then the start
    assert w.service.gateway.grant(run_id) is None, "its token ended with it"


async def test_cancel_stops_a_running_run(make_world: Callable[..., World]) -> None:
    w = await make_world(waits)
    run_id = w.submit()
    await w.until(run_id, "running")
    w.service.mailbox.request_cancel(run_id)
    row = await w.until(run_id, "cancelled")
    assert row.error == "cancelled on request" and "stop" in w.backend.calls


async def test_queued_runs_wait_while_the_gate_holds_or_refuses_and_start_once_it_opens(
        make_world: Callable[..., World]) -> None:
    """The guard canary's word reaches the scheduler through the ``Gate`` the wiring hands it: held (the canary
    still runs) or refused (the guards did not hold), a pass starts nothing; opened, the next pass starts the run."""
    w = await make_world(waits)
    run_id = w.submit()
    w.service.gate.hold("the guard canary is proving the guards for this CLI")
    for _ in range(3):
        await w.scheduler.tick()
    assert w.row(run_id).status == "queued" and "start" not in w.backend.calls
    w.service.gate.refuse("the guards did not hold for this Claude Code CLI")
    await w.scheduler.tick()
    assert w.row(run_id).status == "queued" and "start" not in w.backend.calls
    w.service.gate.open()
    await w.until(run_id, "running")


async def test_a_vanished_sandbox_puts_its_run_back_in_line_and_frees_its_slot(
        make_world: Callable[..., World]) -> None:
    w = await make_world(waits, resume_backoff_s=60)
    run_id = w.submit()
    await w.until(run_id, "running")
    w.backend.runs.by_handle.clear()  # the engine lost it
    row = await w.until(run_id, "queued")
    assert [x.cause for x in row.losses] == ["vanished"] and row.sandboxes == 1 and row.not_before
    assert "disappeared without writing exit.json" in row.losses[0].error and row.error is None
    assert not w.scheduler.handles and row.token_sha256 is None, "no sandbox, no token while it waits to resume"


async def test_with_max_resumes_0_a_vanished_sandbox_fails_its_run(make_world: Callable[..., World]) -> None:
    w = await make_world(waits, max_resumes=0)
    run_id = w.submit()
    await w.until(run_id, "running")
    w.backend.runs.by_handle.clear()
    row = await w.until(run_id, "failed")
    assert "more than max_resumes = 0" in (row.error or "") and "disappeared without writing exit.json" in row.error
    assert not w.scheduler.handles


async def test_a_start_while_the_engine_is_down_requeues_the_run(make_world: Callable[..., World]) -> None:
    w = await make_world()
    run_id = w.submit()
    w.backend.fail_next(BackendUnavailable("the engine does not answer"))
    await w.scheduler.tick()
    assert w.row(run_id).status == "queued", "the machine's fault, not the run's: it waits its turn"
    assert not w.scheduler.health.backend_up
    assert w.service.gateway.grant(run_id) is None, "a queued run holds no token: the start's grant was ended"
    w.scheduler.backoff.reset()  # the backoff's wait, skipped
    row = await w.until(run_id, "succeeded")
    assert row.error is None and w.scheduler.health.backend_up


async def test_a_run_over_its_budget_is_stopped(make_world: Callable[..., World]) -> None:
    w = await make_world(waits, tenant={"budget_usd.run": 0.05})
    run_id = w.submit()
    await w.until(run_id, "running")
    grant = w.service.gateway.grant(run_id)
    assert grant is not None
    held = await w.service.budgets.admit(grant, 0.01)  # a call let through, then answered as the wire saw it
    assert isinstance(held, Held), held
    await w.service.budgets.settle(grant, held, Usage(input_tokens=1, output_tokens=1, cost_usd=0.06))
    assert grant.refused and "over budget" in grant.refused
    row = await w.until(run_id, "failed")
    assert (row.error or "").startswith("over budget: this run has spent $0.06"), row.error
    assert row.cost_usd == pytest.approx(0.06)


async def test_a_run_over_its_disk_is_stopped(make_world: Callable[..., World]) -> None:
    def fills(run: MemoryRun) -> Generator[None, None, None]:
        (run.layout.run_dir / "big").write_bytes(b"x" * 2_000_000)
        yield

    w = await make_world(fills, max_run_disk_mb=1)
    run_id = w.submit()
    row = await w.until(run_id, "failed")
    assert "more than the 1 MB a run may use" in (row.error or ""), row.error


async def test_a_checkpoint_takes_the_runs_work_into_its_branch(make_world: Callable[..., World]) -> None:
    def works(run: MemoryRun) -> Generator[None, None, None]:
        assert run.spec is not None
        (run.layout.workspace / "hello.py").write_text("print('hello')\n")
        commit = checkpoint(run.layout.workspace, run.layout.bundle, branch=run.layout.branch, base=run.spec.base,
                            message="work")
        run.event("checkpoint", "work handed back", payload={"commit": commit})
        yield
        run.exit("succeeded")

    w = await make_world(works)
    run_id = w.submit()
    await w.until(run_id, "running")
    for _ in range(3):
        await w.scheduler.tick()
    assert w.row(run_id).commit_sha, "taken at the checkpoint, before the run ended"
    w.backend.advance(w.scheduler.handles[run_id])
    row = await w.until(run_id, "succeeded")
    assert row.diffstat is not None and [f["path"] for f in row.diffstat["files"]] == ["hello.py"]


async def test_a_restarted_scheduler_reattaches_to_a_live_run(make_world: Callable[..., World]) -> None:
    w = await make_world(waits)
    run_id = w.submit()
    await w.until(run_id, "running")
    handle = w.scheduler.handles[run_id]
    again = await w.restarted()
    assert again.scheduler.handles == {run_id: handle}, "re-found by the backend, not started again"
    assert again.backend.calls.count("start") == 0
    assert again.service.gateway.grant(run_id) is not None, "its token keeps working"
    again.backend.advance(handle)
    row = await again.until(run_id, "succeeded")
    assert row.claimed_cost_usd == 0.25


async def test_a_replica_that_stops_renewing_loses_its_run_to_another_and_writes_nothing_after(
        make_world: Callable[..., World]) -> None:
    """Two replicas on one registry and one engine: ``a`` starts a run and is paused past its lease; ``b`` takes
    the run over and re-attaches to its sandbox; ``a``, waking in the middle of finishing it, writes nothing and
    removes nothing (its lease is fenced); ``b`` finishes the run, once."""
    w = await make_world(waits, lease_s=1.0, replica="a")
    run_id = w.submit()
    await w.until(run_id, "running")
    a_run = w.row(run_id)
    b_backend = MemoryBackend(w.backend.handler, runs=w.backend.runs)
    b = build(msgspec.structs.replace(w.config, replica="b"), w.registry, Tenants(w.config.tenants),
              b_backend).scheduler
    await b.start(run_loop=False)
    await b.tick()
    assert run_id not in b.handles, "a holds it: b leaves it alone"
    w.scheduler.leases.stop()  # a is paused (SIGSTOP, a long GC, a lost network): its renewer renews nothing
    await asyncio.sleep(1.2)
    await b.tick()
    assert run_id in b.handles and b_backend.calls.count("start") == 0, "taken over: re-attached, not started again"
    w.backend.advance(w.scheduler.handles[run_id])  # the run ends while a is still paused
    await w.scheduler._follow(a_run)  # a wakes up mid-pass, before it renews: it sees the run ended
    assert w.row(run_id).status == "running", "a's finish was fenced"
    assert "remove" not in w.backend.calls and run_id not in w.scheduler.handles, "a let the run go untouched"
    done = None
    for _ in range(50):
        await b.tick()
        done = w.row(run_id)
        if done.status == "succeeded":
            break
    assert done is not None and done.status == "succeeded" and done.claimed_cost_usd == 0.25
    assert b_backend.calls.count("remove") == 1
    await w.scheduler.tick()  # a's next pass: nothing of the run is its own any more
    assert w.row(run_id) == done and w.registry.leases.unheld(now=time.time()) == ()
    await b.stop()


async def test_a_replica_that_takes_over_a_run_its_last_holder_ended_meanwhile_lets_it_go_untouched(
        make_world: Callable[..., World]) -> None:
    """The take-over's read-then-take race (the chaos test's double ``run.finished``): ``b`` reads a run as running,
    ``a`` ends it, then ``b`` takes its lease and re-attaches from what it read. ``b`` finishes nothing — no second
    end, no removal, no announcement — and lets the lease go."""
    w = await make_world(waits, lease_s=1.0, replica="a")
    run_id = w.submit()
    await w.until(run_id, "running")
    read = w.row(run_id)  # b's read of the live runs, a moment before a ends this one
    b_backend = MemoryBackend(w.backend.handler, runs=w.backend.runs)
    b = build(msgspec.structs.replace(w.config, replica="b"), w.registry, Tenants(w.config.tenants),
              b_backend).scheduler
    await b.start(run_loop=False)
    assert run_id not in b.handles, "a holds it"
    w.backend.advance(w.scheduler.handles[run_id])
    done = await w.until(run_id, "succeeded")  # a ended it, removed its sandbox, let its lease go
    assert b.leases.hold(run_id), "no one holds an ended run: b's take goes through"
    await b.recovery.recover_one(read, await asyncio.to_thread(b_backend.live))
    assert w.row(run_id) == done, "one end: a's"
    assert "remove" not in b_backend.calls and run_id not in b.handles
    assert w.registry.leases.renew("b", ttl=1.0, now=time.time()) == {}, "b let its lease go"
    await b.stop()


async def test_on_postgres_a_run_queued_by_another_replica_wakes_the_scheduler_at_once(
        make_world: Callable[..., World], postgres_url: str) -> None:
    """LISTEN/NOTIFY: with a poll of a minute, only the notification can start the run before the test's end."""
    w = await make_world(waits, postgres=postgres_url, run_loop=True, poll_s=60)
    other = Registry.postgres(postgres_url)  # another replica's API took the submit
    run_id = f"20261202-000000-{secrets.token_hex(16)}"
    try:
        await asyncio.sleep(0.5)  # the loop's first pass is over: it waits a minute, or for a wake-up
        other.runs.create(id=run_id, tenant="acme", ask="做一个 hello", options={}, repo=str(w.repo))
        for _ in range(100):
            if w.row(run_id).status == "running":
                break
            await asyncio.sleep(0.1)
        assert w.row(run_id).status == "running", "woken by the notification, not by its next poll"
    finally:
        other.close()
        await w.scheduler.stop()


async def test_a_stop_that_meets_a_wake_up_ends_the_loop(make_world: Callable[..., World]) -> None:
    """The CI hang of 2026-12-06: another replica's notification woke the loop in the very pass its stop cancelled
    it; ``asyncio.wait_for`` (3.11) took the wake-up and dropped the cancel, the loop went on waiting a minute at a
    time, and ``stop`` awaited it for 48 minutes."""
    w = await make_world(waits, run_loop=True, poll_s=60)
    await asyncio.sleep(0.2)  # its first pass is over: it waits a minute, or for a wake-up
    webhooks = w.scheduler.results.webhooks  # the webhook sender's loop waits the same way
    tasks = [w.scheduler._task, webhooks._task]
    assert all(t is not None and not t.done() for t in tasks)
    w.scheduler.wake()  # what the LISTEN thread does on a notification
    webhooks.wake()  # what a run's end does
    try:
        async with asyncio.timeout(10):
            await w.scheduler.stop()
    except TimeoutError:
        for t in tasks:
            t.cancel()  # type: ignore[union-attr]
        raise AssertionError("the stop waited on a loop that took the wake-up and dropped the cancel") from None
    assert all(t.cancelled() for t in tasks), "both loops ended by the stop"  # type: ignore[union-attr]


async def test_an_error_handling_one_runs_output_fails_that_run_alone(make_world: Callable[..., World]) -> None:
    w = await make_world(waits)
    poisoned, other = w.submit(), w.submit("另一个")
    await w.until(other, "running")
    await w.until(poisoned, "running")
    handle = w.scheduler.handles[poisoned]
    w.backend.fail_next(RuntimeError("a passing fault"), handle=handle)  # once: the next pass tries again
    await w.scheduler.tick()
    w.scheduler.backoff.reset()
    await w.scheduler.tick()
    assert w.row(poisoned).status == "running", "one failed pass is no poison"
    w.backend.fail_next(RuntimeError("an output nobody expected"), times=POISON_AFTER, handle=handle)  # every pass
    for _ in range(POISON_AFTER):
        await w.scheduler.tick()
        w.scheduler.backoff.reset()  # the backoff's wait between the passes, skipped
    row = await w.until(poisoned, "failed")
    assert "could not handle this run's output" in (row.error or "") and "RuntimeError" in (row.error or "")
    assert w.service.gateway.grant(poisoned) is None and poisoned not in w.scheduler.handles
    assert w.row(other).status == "running", "the other run goes on"
    w.backend.advance(w.scheduler.handles[other])
    assert (await w.until(other, "succeeded")).error is None


async def test_a_tenant_removed_from_the_file_loses_its_live_runs(make_world: Callable[..., World]) -> None:
    w = await make_world(waits)
    run_id = w.submit()
    await w.until(run_id, "running")
    Path(w.config.tenants).write_text("tenant = []\n")
    row = await w.until(run_id, "failed")
    assert "removed from the tenants file" in (row.error or ""), row.error
    assert w.service.gateway.grant(run_id) is None


async def test_a_kubernetes_start_during_an_api_outage_is_requeued_not_failed(make_world: Callable[..., World]) -> None:
    class Api(http.server.BaseHTTPRequestHandler):  # the API server, up for the re-attach: no Job of ours yet
        def do_GET(self) -> None:  # noqa: N802
            body = b'{"items": []}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{api.server_address[1]}"
    w = await make_world(backend=lambda cfg: KubernetesBackend(
        KubeAPI(url, token="t", timeout=5), image="flower-sandbox:test", namespace="flower", claim="flower-data",
        data_dir=cfg.data_path.parent, uid=10001, gid=10001))  # the volume holds the runs and the repository;
    # a pod is never root: these tests run as root, the chart's service does not
    assert w.scheduler.health.backend_up
    api.shutdown()
    api.server_close()  # the outage: nothing answers at that address any more
    run_id = w.submit()
    await w.scheduler.tick()
    row = w.row(run_id)
    assert (row.status, row.error, row.branch) == ("queued", None, None), "requeued, not failed, and nothing left"
    assert not w.scheduler.health.backend_up and "did not answer" in (w.scheduler.health.backend_error or "")


async def test_a_run_forging_ask_events_gets_a_bounded_number_of_question_webhooks(
        make_world: Callable[..., World], tmp_path: Path) -> None:
    from service.results import ASKED_PER_RUN

    secret = tmp_path / "hook.secret"
    secret.write_text("s3cret-hook-key\n")

    def forges(run: MemoryRun) -> Generator[None, None, None]:
        for i in range(4 * ASKED_PER_RUN):  # its own claims: any number of "questions", each a new id
            run.event("ask", f"question {i}?", payload={"state": "asked", "id": f"q-{i}", "options": ["a"]})
        run.event("ask", "again?", payload={"state": "asked", "id": "q-0"})
        yield

    w = await make_world(forges, tenant={"webhook_url": "http://127.0.0.1:9/hook",
                                         "webhook_secret_file": str(secret)})
    run_id = w.submit()
    await w.until(run_id, "running")
    await w.scheduler.tick()
    asked = [d for d in w.registry.deliveries.list(limit=10_000) if d.event == "question.asked"]
    assert len(asked) == ASKED_PER_RUN, len(asked)
    assert len({d.id for d in asked}) == ASKED_PER_RUN


async def test_a_poisoned_run_leaves_no_error_streak_behind(make_world: Callable[..., World]) -> None:
    """The leak: the passes that failed on a run's output are logged under the run's key; a run ended as poisoned
    never said "ok" again, so its streak stayed open (``errors.failing()``) for the life of the process."""
    w = await make_world(waits)
    run_id = w.submit()
    await w.until(run_id, "running")
    w.backend.fail_next(RuntimeError("an output nobody expected"), times=POISON_AFTER,
                        handle=w.scheduler.handles[run_id])
    for _ in range(POISON_AFTER):
        await w.scheduler.tick()
        w.scheduler.backoff.reset()
    await w.until(run_id, "failed")
    assert "scheduler.follow_failed" not in w.scheduler.errors.failing(), "the ended run's streak is kept"


async def test_nothing_of_an_ended_run_is_kept_whichever_way_it_ended(make_world: Callable[..., World]) -> None:
    def hands_back_and_exits(run: MemoryRun) -> None:  # the checkpoint is read by the finish's own last drain
        assert run.spec is not None
        (run.layout.workspace / "hello.py").write_text("print('hello')\n")
        checkpoint(run.layout.workspace, run.layout.bundle, branch=run.layout.branch, base=run.spec.base,
                   message="work")
        run.event("checkpoint", "work handed back")
        run.event("tool_call", "Write")
        run.exit("succeeded")

    def plays(run: MemoryRun) -> Generator[None, None, None] | None:
        if "wait" in run.spec.ask if run.spec else False:
            return waits(run)
        hands_back_and_exits(run)
        return None

    w = await make_world(plays)
    done, cancelled = w.submit("hand back"), w.submit("wait, then be cancelled")
    await w.until(done, "succeeded")
    await w.until(cancelled, "running")
    w.service.mailbox.request_cancel(cancelled)
    await w.until(cancelled, "cancelled")
    w.backend.fail_next(RuntimeError("the engine refused this one"))
    unstarted = w.submit("never starts")
    await w.until(unstarted, "failed")
    assert w.row(done).commit_sha, "its work was taken by the finish's own last read"
    assert "could not start the run" in (w.row(unstarted).error or ""), w.row(unstarted).error
    assert len(w.scheduler.live) == 0 and not w.scheduler.handles, "no record of an ended run"
    assert w.service.gateway.grants() == [], "no token of an ended run"
    assert not w.scheduler.errors.failing(), "no error streak of an ended run"
    assert all(w.scheduler.backoff.failures(r) == 0 for r in (done, cancelled, unstarted))


async def test_one_tenants_long_queue_does_not_delay_another_tenants_start(
        make_world: Callable[..., World], git_repo: Callable[..., Path]) -> None:
    """acme may fill every slot and has more queued behind them; beta submits later. When a slot frees, it goes to
    beta (the tenant with none executing), not to acme's next-oldest run; the queue is read a few rows a tenant."""
    w = await make_world(waits, max_running=2)  # acme: quota 2
    beta_repo = git_repo(w.root / "repos" / "beta")
    creds = w.root / "acme.env"
    with open(w.config.tenants, "a") as f:  # a second tenant (the file is re-read when it changes)
        f.write(f'\n[[tenant]]\nname = "beta"\ntoken = "beta-token-0123456789"\nrepo = "{beta_repo}"\n'
                f'credentials = "{creds}"\nquota = 2\n')
    acme = [w.submit(f"acme {i}") for i in range(6)]
    await w.until(acme[1], "running")
    beta = w.submit("beta 0", tenant="beta")
    w.backend.advance(w.scheduler.handles[acme[0]])  # a slot frees
    await w.until(acme[0], "succeeded")
    await w.until(beta, "running", passes=5)
    assert [w.row(r).status for r in acme[2:]] == ["queued"] * 4, "acme's next runs wait for the next free slot"
    w.backend.advance(w.scheduler.handles[acme[1]])
    await w.until(acme[2], "running", passes=5)
    assert w.row(beta).status == "running"

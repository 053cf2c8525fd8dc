"""The REST API: tenants submit asks, follow their runs, answer questions, read the results.

Every ``/v1`` route needs ``Authorization: Bearer <tenant token>`` (401 otherwise) and only
ever sees the caller's own runs (another tenant's run is a 404, indistinguishable from none).
Errors are JSON ``{"status_code", "error", ...}`` with one sentence in ``error``; a malformed
body is a 400 naming the field, never a 500, and nothing is created or lost on bad input.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import msgspec
from litestar import Litestar, Request, Response, Router, get, post
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import (
    ClientException,
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    SerializationException,
    ServiceUnavailableException,
    ValidationException,
)
from litestar.handlers import BaseRouteHandler
from litestar.params import Parameter
from litestar.response import ServerSentEvent, ServerSentEventMessage
from litestar.static_files import create_static_files_router
from litestar.status_codes import HTTP_409_CONFLICT, HTTP_422_UNPROCESSABLE_ENTITY, HTTP_429_TOO_MANY_REQUESTS

from sandbox.layout import RunLayout
from sandbox.spec import RunSpec

from .config import ServiceConfig
from .events import read_new
from .gateway import Gateway
from .health import is_disk_full
from .logging import get_logger
from .registry import ACTIVE, STATUSES, Registry, Run
from .scheduler import END, Scheduler
from .tenants import Tenant, TenantNotReady, Tenants

__all__ = ["create_app", "make_backend", "SubmitBody", "AnswerBody", "TextBody"]

log = get_logger("flower.service.api")

MAX_ASK = 100_000
MAX_TEXT = 20_000
KEEPALIVE_S = 15.0
QID_RE = r"^[\w.-]{1,200}$"


# -- wire types ------------------------------------------------------------------------------
class SubmitBody(msgspec.Struct, forbid_unknown_fields=True):
    ask: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ASK)]
    options: dict[str, Any] = {}


class AnswerBody(msgspec.Struct, forbid_unknown_fields=True):
    question_id: Annotated[str, msgspec.Meta(pattern=QID_RE)]
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]


class TextBody(msgspec.Struct, forbid_unknown_fields=True):
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT)]


class Conflict(ClientException):
    status_code = HTTP_409_CONFLICT


class Unprocessable(ClientException):
    status_code = HTTP_422_UNPROCESSABLE_ENTITY


class TooManyRequests(ClientException):
    status_code = HTTP_429_TOO_MANY_REQUESTS


class InsufficientStorage(HTTPException):
    status_code = 507


# -- auth ------------------------------------------------------------------------------------
def _bearer(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    header = connection.headers.get("authorization", "")
    scheme, _sep, token = header.partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="flower"'}
    if scheme.lower() != "bearer" or not token.strip():
        raise NotAuthorizedException("missing bearer token: send `Authorization: Bearer <your tenant token>`",
                                     headers=challenge)
    tenant = connection.app.state.tenants.authenticate(token.strip())
    if tenant is None:
        raise NotAuthorizedException("this token belongs to no tenant: check it, or ask the operator for yours",
                                     headers=challenge)
    connection.state.tenant = tenant


async def _tenant(request: Request[Any, Any, Any]) -> Tenant:
    return request.state.tenant


# -- helpers ---------------------------------------------------------------------------------
def _app_state(request: Request[Any, Any, Any]) -> tuple[Registry, Scheduler]:
    return request.app.state.registry, request.app.state.scheduler


def _own(request: Request[Any, Any, Any], tenant: Tenant, run_id: str) -> Run:
    run = request.app.state.registry.get(run_id, tenant=tenant.name)
    if run is None:
        raise NotFoundException(f"run {run_id} not found")
    return run


def new_run_id() -> str:
    """Sortable by time, with 128 random bits: nobody guesses another tenant's run."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(16)


def _sse(seq: int, ev: dict[str, Any]) -> ServerSentEventMessage:
    data = json.dumps({"seq": seq, **ev}, ensure_ascii=False, default=str)
    kind = ev.get("kind")
    event = kind if isinstance(kind, str) and re.fullmatch(r"[\w.-]{1,64}", kind) else "event"
    return ServerSentEventMessage(data=data, event=event, id=seq)


# -- runs ------------------------------------------------------------------------------------
@post("/runs", status_code=201)
async def submit(request: Request[Any, Any, Any], tenant: Tenant, data: SubmitBody) -> Response[dict[str, Any]]:
    registry, scheduler = _app_state(request)
    if scheduler.refusal:
        raise ServiceUnavailableException(scheduler.refusal)
    ask = data.ask.strip()
    if not ask:
        raise ValidationException("`ask` is blank: say what you want done")
    try:
        tenant.check_options(data.options)
    except TenantNotReady as e:
        raise ValidationException(str(e)) from None
    run_id = new_run_id()
    try:
        spec = RunSpec(run_id=run_id, tenant=tenant.name, ask=ask, options=dict(data.options), env={})
    except (ValueError, TypeError, msgspec.ValidationError) as e:
        raise ValidationException(f"invalid options: {e}") from None
    try:
        layout = RunLayout(scheduler.config.runs_root, run_id, Path(tenant.repo).name)
        await asyncio.to_thread(tenant.check_ready)
    except TenantNotReady as e:
        raise Unprocessable(str(e)) from None
    except ValueError as e:
        raise Unprocessable(f"tenant {tenant.name} cannot run here: {e}") from None
    disk = scheduler.health.disk(fresh=True)
    if disk.low:
        raise InsufficientStorage(f"the service is low on disk space ({disk.sentence()}): nothing was queued; "
                                  "submit again once the operator has freed space", headers={"Retry-After": "60"})
    try:
        run = registry.create(id=run_id, tenant=tenant.name, ask=ask, options=spec.options, repo=tenant.repo)
    except sqlite3.OperationalError as e:
        if not is_disk_full(e):
            raise
        scheduler.health.disk_full_seen()
        raise InsufficientStorage("the service's disk is full: nothing was queued; submit again once the operator "
                                  "has freed space", headers={"Retry-After": "60"}) from None
    log.info("run.submitted", tenant=tenant.name, run=run.id, options=sorted(data.options))
    scheduler.wake()
    return Response({"id": run.id, "status": run.status, "branch": layout.branch}, status_code=201,
                    headers={"Location": f"/v1/runs/{run.id}"})


@get("/runs")
async def list_runs(request: Request[Any, Any, Any], tenant: Tenant,
                    status: str | None = None,
                    limit: Annotated[int, Parameter(ge=1, le=1000)] = 100) -> dict[str, Any]:
    statuses = None
    if status:
        statuses = [s.strip() for s in status.split(",") if s.strip()]
        bad = [s for s in statuses if s not in STATUSES]
        if bad:
            raise ValidationException(f"unknown status {', '.join(bad)} (known: {', '.join(STATUSES)})")
    runs = request.app.state.registry.list(tenant=tenant.name, statuses=statuses, limit=limit)
    return {"runs": [r.public() for r in runs]}


@get("/runs/{run_id:str}")
async def get_run(request: Request[Any, Any, Any], tenant: Tenant, run_id: str) -> dict[str, Any]:
    return _own(request, tenant, run_id).public()


@get("/runs/{run_id:str}/events")
async def events(request: Request[Any, Any, Any], tenant: Tenant, run_id: str,
                 after: Annotated[int | None, Parameter(ge=0)] = None) -> ServerSentEvent:
    """Server-sent events: every event line from ``after`` (or Last-Event-ID) on, then live; ``end`` last."""
    run = _own(request, tenant, run_id)
    if after is None:
        last = request.headers.get("last-event-id", "").strip()
        if last and not re.fullmatch(r"[0-9]{1,18}", last):
            raise ValidationException("Last-Event-ID must be the number of the last event received")
        after = int(last) if last else 0
    registry, scheduler = _app_state(request)
    if scheduler.streams[tenant.name] >= scheduler.config.max_streams_per_tenant:
        raise TooManyRequests(f"tenant {tenant.name} already has {scheduler.streams[tenant.name]} event streams open "
                              f"(at most {scheduler.config.max_streams_per_tenant}); close one first",
                              headers={"Retry-After": "5"})
    folder = scheduler.layout(run).dir
    queue = scheduler.subscribe(run.id)  # before the replay: nothing falls between the two

    async def stream() -> AsyncIterator[ServerSentEventMessage]:
        scheduler.streams[tenant.name] += 1  # counted while served (a stream never started is never counted)
        sent = after
        offset, read = 0, 0  # how far this stream has read the file: bytes, events

        async def from_file() -> list[tuple[int, dict[str, Any]]]:
            """Everything in the file past ``sent`` (the file is the truth; the queue only says "more")."""
            nonlocal offset, read
            out: list[tuple[int, dict[str, Any]]] = []
            while True:
                evs, new_offset, read = await asyncio.to_thread(read_new, folder, offset, read)
                out += [(n, e) for n, e in evs if n > sent]
                if new_offset == offset:
                    return out
                offset = new_offset

        try:
            while True:
                for seq, ev in await from_file():
                    yield _sse(seq, ev)
                    sent = seq
                current = registry.get(run.id)
                if current is None or current.terminal:
                    break
                item: Any = None
                while True:
                    try:
                        item = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                    except TimeoutError:
                        yield ServerSentEventMessage(comment="keep-alive")
                        continue
                    if item is END:
                        break
                    seq, ev = item
                    if seq <= sent:
                        continue
                    if seq > sent + 1:  # missed some (a slow client's queue overflowed): back to the file
                        break
                    yield _sse(seq, ev)
                    sent = seq
                if item is END:  # the run ended, or the service is stopping: the rest is in the file
                    break
            for seq, ev in await from_file():
                yield _sse(seq, ev)
                sent = seq
            final = registry.get(run.id)
            status = final.status if final is not None else "unknown"
            yield ServerSentEventMessage(data=json.dumps({"status": status, "events": sent}), event="end")
        finally:
            scheduler.unsubscribe(run.id, queue)
            scheduler.streams[tenant.name] -= 1

    return ServerSentEvent(stream(), headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@get("/runs/{run_id:str}/questions")
async def questions(request: Request[Any, Any, Any], tenant: Tenant, run_id: str) -> dict[str, Any]:
    run = _own(request, tenant, run_id)
    if run.status not in ACTIVE:
        return {"questions": []}
    return {"questions": await asyncio.to_thread(request.app.state.scheduler.questions, run)}


def _need_active(run: Run, what: str) -> None:
    if run.status not in ACTIVE:
        hint = "it has not started yet" if run.status == "queued" else "it has ended"
        raise Conflict(f"run {run.id} is {run.status} ({hint}); {what} only reach a running run")


@post("/runs/{run_id:str}/answers", status_code=200)
async def answer(request: Request[Any, Any, Any], tenant: Tenant, run_id: str, data: AnswerBody) -> dict[str, Any]:
    run = _own(request, tenant, run_id)
    _need_active(run, "answers")
    scheduler: Scheduler = request.app.state.scheduler
    if not any(q["id"] == data.question_id for q in await asyncio.to_thread(scheduler.questions, run)):
        raise NotFoundException(f"question {data.question_id} is not open on run {run.id} "
                                "(answered, timed out or never asked); GET its questions to see the open ones")
    await asyncio.to_thread(scheduler.mail, run, f"answers/{data.question_id}.json",
                            {"text": data.text, "answered_at": _now()})
    log.info("run.answered", tenant=tenant.name, run=run.id, question=data.question_id)
    return {"question_id": data.question_id, "accepted": True}


@post("/runs/{run_id:str}/messages", status_code=202)
async def message(request: Request[Any, Any, Any], tenant: Tenant, run_id: str, data: TextBody) -> dict[str, Any]:
    run = _own(request, tenant, run_id)
    _need_active(run, "messages")
    mid = f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(8)}"
    await asyncio.to_thread(request.app.state.scheduler.mail, run, f"inbox/{mid}.json",
                            {"text": data.text, "sent_at": _now()})
    log.info("run.message", tenant=tenant.name, run=run.id, chars=len(data.text))
    return {"id": mid, "accepted": True}


@post("/runs/{run_id:str}/interrupt", status_code=202)
async def interrupt(request: Request[Any, Any, Any], tenant: Tenant, run_id: str, data: TextBody) -> dict[str, Any]:
    run = _own(request, tenant, run_id)
    _need_active(run, "interrupts")
    await asyncio.to_thread(request.app.state.scheduler.mail, run, "interrupt.json",
                            {"words": data.text, "at": _now()})
    log.info("run.interrupt", tenant=tenant.name, run=run.id, chars=len(data.text))
    return {"accepted": True}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@post("/runs/{run_id:str}/cancel", status_code=200)
async def cancel(request: Request[Any, Any, Any], tenant: Tenant, run_id: str,
                 wait: Annotated[float, Parameter(ge=0, le=120)] = 30.0) -> Response[dict[str, Any]]:
    """Queued: cancelled at once. Running: stopped; waits up to ``wait`` seconds for it to end (else 202)."""
    run = _own(request, tenant, run_id)
    if run.terminal:
        raise Conflict(f"run {run.id} has already ended ({run.status})")
    registry, scheduler = _app_state(request)
    scheduler.request_cancel(run.id)
    log.info("run.cancel_requested", tenant=tenant.name, run=run.id)
    deadline = time.monotonic() + wait
    while True:
        current = registry.get(run.id)
        assert current is not None
        if current.terminal or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(0.1, request.app.state.config.poll_s))
    return Response(current.public(), status_code=200 if current.terminal else 202)


@get("/runs/{run_id:str}/diff")
async def get_diff(request: Request[Any, Any, Any], tenant: Tenant, run_id: str) -> Response[str]:
    """``git diff`` of the run's branch against its base, from the tenant's repository only: while the run is
    live, that is its last checkpoint (the runner hands its work back after every step)."""
    from sandbox.worktree import diff

    run = _own(request, tenant, run_id)
    if not run.base:
        raise Conflict(f"run {run.id} never started ({run.status}), so it has no diff")
    branch = request.app.state.scheduler.layout(run).branch
    try:
        text = await asyncio.to_thread(diff, run.repo, branch, base=run.base)
    except Exception as e:  # noqa: BLE001
        log.warning("run.diff_failed", tenant=tenant.name, run=run.id, error=str(e)[:300])
        raise NotFoundException(f"the diff of run {run.id} cannot be read: branch {branch} "
                                "or its base is gone from the repository") from None
    return Response(text, media_type="text/x-diff; charset=utf-8",
                    headers={"X-Flower-Branch": branch, "X-Flower-Base": run.base,
                             "X-Flower-Status": run.status})


@get("/runs/{run_id:str}/manifest")
async def manifest(request: Request[Any, Any, Any], tenant: Tenant, run_id: str) -> dict[str, Any]:
    from sandbox.backends.base import read_exit
    from sandbox.runfiles import read_json

    run = _own(request, tenant, run_id)
    folder = request.app.state.scheduler.layout(run).dir
    steps = await asyncio.to_thread(read_json, folder, "run/manifest.json", limit=8 * 1024 * 1024)
    return {"id": run.id, "status": run.status, "steps": steps if isinstance(steps, list) else [],
            "exit": await asyncio.to_thread(read_exit, folder)}


@get("/usage")
async def usage(request: Request[Any, Any, Any], tenant: Tenant,
                day: Annotated[str | None, Parameter(pattern=r"^\d{4}-\d{2}-\d{2}$")] = None) -> dict[str, Any]:
    """What the tenant spent on ``day`` (UTC, default today), as the model gateway measured it, and its budget."""
    when = day or time.strftime("%Y-%m-%d", time.gmtime())
    spent = request.app.state.registry.spent(tenant.name, when)
    budget = tenant.budget_usd
    return {"tenant": tenant.name, "day": when, "cost_usd": round(spent["cost_usd"], 6),
            "input_tokens": spent["input_tokens"], "output_tokens": spent["output_tokens"],
            "budget_usd": {"run": budget.run, "day": budget.day}}


@get("/healthz")
async def healthz(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    scheduler: Scheduler = request.app.state.scheduler
    task = scheduler._task
    ok = task is not None and not task.done()
    reasons = scheduler.health.reasons()  # degraded still answers 200: a full disk is no reason to restart
    body: dict[str, Any] = {"status": ("degraded" if reasons else "ok") if ok else "scheduler stopped",
                            "backend": request.app.state.config.backend}
    if reasons:
        body["reasons"] = reasons
    if scheduler.refusal:
        ok, body["status"], body["reason"] = False, "refusing runs", scheduler.refusal
    elif scheduler.hold:
        body["guards"] = scheduler.hold
    return Response(body, status_code=200 if ok else 503)


@get("/metrics", media_type="text/plain; version=0.0.4")
async def metrics(request: Request[Any, Any, Any]) -> str:
    return request.app.state.scheduler.health.prometheus()


# -- errors ----------------------------------------------------------------------------------
def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    body: dict[str, Any] = {"status_code": exc.status_code, "error": exc.detail}
    if isinstance(exc.__cause__, SerializationException):
        body["error"] = f"the request body is not valid JSON ({exc.detail}): send a JSON object"
    if isinstance(exc, ValidationException) and exc.extra:
        extra = exc.extra if isinstance(exc.extra, list) else [exc.extra]
        msgs = []
        for item in extra:
            if isinstance(item, dict):
                where = item.get("key") or item.get("source") or ""
                where = "body" if where == "data" else where
                msg = str(item.get("message", "")).strip()
                msgs.append(f"{where}: {msg}" if where and where not in msg else msg)
        if msgs:
            body["error"] = "invalid request: " + "; ".join(m for m in msgs if m)
        body["extra"] = extra
    return Response(body, status_code=exc.status_code, headers=exc.headers)


def _too_deep(request: Request[Any, Any, Any], exc: RecursionError) -> Response[dict[str, Any]]:
    return Response({"status_code": 400, "error": "the request body nests too deeply: send a flat JSON object"},
                    status_code=400)


def _crash(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    if is_disk_full(exc):  # an answer, a message, a cancel that cannot be written: the disk, not the service
        request.app.state.scheduler.health.disk_full_seen()
        log.warning("api.disk_full", path=request.url.path, method=request.method, error=str(exc)[:300])
        return Response({"status_code": 507, "error": "the service's disk is full, so this was not saved; "
                         "try again once the operator has freed space"}, status_code=507,
                        headers={"Retry-After": "60"})
    log.exception("api.unhandled", path=request.url.path, method=request.method)
    return Response({"status_code": 500, "error": "internal error in the service; the operator's log has details"},
                    status_code=500)


# -- assembly --------------------------------------------------------------------------------
def make_backend(config: ServiceConfig, tenants: int = 1) -> Any:
    """The configured backend, scoped to this service's runs: a restarted service adopts its own runs only.

    The local backend walls runs in with bubblewrap; without it (not installed, or ``local_isolation="none"``)
    it serves one tenant only, unless ``unsafe_shared_local`` says the operator accepts that every run
    sees every tenant's files."""
    if config.backend == "local":
        from sandbox.backends import LocalBackend
        from sandbox.backends.local import bwrap_available

        isolation = config.local_isolation
        if isolation == "auto":
            isolation = "bwrap" if bwrap_available() else "none"
        if isolation == "none":
            if tenants > 1 and not config.unsafe_shared_local:
                raise ValueError(f"the local backend without bubblewrap cannot keep {tenants} tenants apart: install "
                                 "bubblewrap (`apt-get install bubblewrap`), use the docker backend, or set "
                                 "unsafe_shared_local = true if every tenant may read every other's files")
            log.warning("backend.unisolated", backend="local", tenants=tenants,
                        hint="runs are plain processes of the service's uid: install bubblewrap to isolate them")
        return LocalBackend(root=config.runs_root, isolation=isolation)
    scope = hashlib.sha256(str(config.runs_root).encode()).hexdigest()[:16]
    if config.backend == "kubernetes":  # in the cluster, as helm/ sets it up (FLOWER_K8S_* variables)
        from sandbox.backends.kubernetes import KubernetesBackend

        return KubernetesBackend.from_environment(config.image, data_dir=config.data_path,
                                                  labels={"flower.service": scope})
    from sandbox.backends import DockerBackend

    image = config.image
    if not image:  # no registry needed: the image is made from this tree, and reused while the tree is unchanged
        from sandbox.image import PROJECT, ensure_image

        if not (PROJECT / "Dockerfile").is_file():
            raise ValueError("the docker backend needs the run image: set `image = \"flower/sandbox:<tag>\"` in the "
                             "service config (an installed service has no Dockerfile to build it from)")

        log.info("image.ensure", target="sandbox")
        image = ensure_image("sandbox")
    return DockerBackend(image, network_mode=config.network_mode, labels={"flower.service": scope},
                         user=config.run_user, mem_limit=config.run_memory or None, cpus=config.run_cpus or None,
                         pids_limit=config.run_pids or None, tmp_size=config.run_tmp_size)


async def _canary(scheduler: Scheduler, config: ServiceConfig) -> None:
    from .canary import prove_guards

    why = await prove_guards(cli_path=config.guard_canary_cli)
    scheduler.refusal, scheduler.hold = why, None
    if why:
        get_logger("flower.service").error("service.refusing_runs", reason=why)
    else:
        get_logger("flower.service").info("canary.passed")
    scheduler.wake()


def create_app(config: ServiceConfig, *, backend: Any = None) -> Litestar:
    """The app; the scheduler starts with it and stops with it (runs themselves keep running)."""
    state_log = get_logger("flower.service")
    tenants = Tenants(config.tenants, on_reload_error=lambda why: state_log.error("tenants.reload_failed",
                                                                                   error=why))
    config.data_path.mkdir(parents=True, exist_ok=True, mode=0o700)
    config.runs_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    registry = Registry(config.db_path)
    if backend is None:
        backend = make_backend(config, tenants=len(tenants.all()))
    gateway = Gateway(prices=config.prices)
    scheduler = Scheduler(config, registry, tenants, backend, gateway)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        canary = None
        if config.guard_canary:
            scheduler.hold = "the guard canary is proving the guards for this CLI; queued runs start when it passes"
            canary = asyncio.get_running_loop().create_task(_canary(scheduler, config), name="flower-canary")
        if config.gateway_port is not None:
            port = await gateway.listen_tcp(config.gateway_host, config.gateway_port)
            state_log.info("gateway.listening", host=config.gateway_host, port=port)
        await scheduler.start()
        state_log.info("service.started", backend=config.backend, data_dir=config.data_dir,
                       tenants=len(tenants.all()), max_running=config.max_running)
        try:
            yield
        finally:
            if canary is not None:
                canary.cancel()
            await scheduler.stop()
            await gateway.aclose()
            registry.close()
            state_log.info("service.stopped")

    v1 = Router(path="/v1", route_handlers=[submit, list_runs, get_run, events, questions, answer, message,
                                           interrupt, cancel, get_diff, manifest, usage],
                guards=[_bearer], dependencies={"tenant": Provide(_tenant)})
    return Litestar(
        route_handlers=[v1, healthz, metrics,  # the web page: static files, no build step (service/web/)
                        create_static_files_router("/", [Path(__file__).parent / "web"], html_mode=True)],
        lifespan=[lifespan],
        state=State({"config": config, "registry": registry, "scheduler": scheduler, "tenants": tenants}),
        exception_handlers={HTTPException: _http_error, RecursionError: _too_deep, Exception: _crash},
        request_max_body_size=1024 * 1024,
        logging_config=None,
        openapi_config=None,
    )

"""Signed webhooks: a tenant's ``webhook_url`` hears when its runs start, ask a question and end.

The scheduler hands each event over in one call (through ``service.results``) and goes on: the delivery is a row
in the registry (``deliveries``) at once, and a task of this module's sends it — never the run, never in a pass.
A POST of the JSON ``WebhookBody``, with

    X-Flower-Event: run.started | question.asked | run.parked | run.resumed | run.ended
    X-Flower-Delivery: <delivery id>           (the same on every try of it)
    X-Flower-Signature-256: sha256=<hex HMAC-SHA256 of the body, keyed with webhook_secret_file's contents>

as GitHub signs with ``X-Hub-Signature-256``: a receiver recomputes the HMAC over the raw body and compares in
constant time. A 2xx ends it; a 3xx (redirects are not followed) or a 4xx other than 408/429 is given up at
once; anything else — 5xx, 408, 429, no answer within ``TRY_S`` — is tried again after ``webhook_retry_s``,
doubling, ``TRIES`` tries in all. ``TRY_S`` bounds the whole try (connect, send, status line and headers; the
body is not read), however slowly a receiver trickles its answer. One run's deliveries go out in order: the next
waits until the one before it ended. The rows outlive a restart (pending ones are sent by the next service), and
``GET /v1/webhooks/deliveries`` shows them.

Fair: a replica has ``webhook_slots`` tries in flight at once, at most ``webhook_tenant_slots`` of them one
tenant's, so a tenant whose receiver hangs holds up its own webhooks only.

Several replicas on one registry send each try once: a try is claimed in the registry before it is sent
(``Registry.claim_delivery``) for ``CLAIM_S``, which outlives the try's deadline by ``MARGIN_S``; a try that could
not end ``MARGIN_S`` before its claim does is not sent, and its outcome is stored only while the claim is still
its sender's (``Registry.delivery_tried``): a replica that stalled past its claim stores nothing. One whose sender
died mid-try is sent again after ``CLAIM_S``, with the same ``X-Flower-Delivery``, which is what a receiver
deduplicates on.
The secret is read from its file at each try (a rotation applies at once) and is never logged or stored.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import httpx
import msgspec

from ..clock import SYSTEM, Clock
from ..logging import get_logger
from ..registry import DeliveriesTable, Delivery, Push, Run
from ..registry.schedules import Fire
from ..tenants import Tenant, Tenants

__all__ = ["Webhooks", "WebhookBody", "EventName", "sign", "SIGNATURE_HEADER", "TRIES", "TRY_S", "CLAIM_S"]

log = get_logger("flower.service.webhooks")

EventName = Literal["run.started", "question.asked", "run.parked", "run.resumed", "run.ended"]
SIGNATURE_HEADER = "X-Flower-Signature-256"
TRIES = 5  # 1 + 4 retries: with webhook_retry_s = 15, over about four minutes
TRY_S = 10.0  # a whole try: connect, send, status line and headers — a receiver trickling bytes gets no longer
MARGIN_S = 20.0  # a claim outlives its try by this: a slow registry write, a paused sender, replicas' clocks apart
CLAIM_S = TRY_S + MARGIN_S  # a delivery being sent is no other replica's until then (then its sender died)
SLOTS = 16  # tries in flight at once on a replica, all tenants together (one per run at a time)
TENANT_SLOTS = 4  # … of them one tenant's at most: its hanging receiver holds up no other tenant's webhooks
SECRET_BYTES = 4096
RETRIED = {408, 429}


class QuestionBody(msgspec.Struct):
    id: str
    text: str
    options: list[str]


class PushBody(msgspec.Struct):
    """Where the run's branch was pushed (``state`` "pushed"), or why not ("failed", with ``error``)."""
    state: str
    url: str
    ref: str
    commit: str
    error: str | None


class FiredBody(msgspec.Struct):
    """What started the run when no one submitted it: a schedule's tick (``by`` "schedule") or its trigger."""
    by: str
    schedule: str
    tick: str | None


class WebhookBody(msgspec.Struct, kw_only=True):
    """What a webhook POSTs. Times are ISO 8601 UTC; ``at`` is when the event happened. ``question`` comes with
    ``question.asked``; ``pushed`` and ``push`` with ``run.ended`` (``push`` is null when no push was due);
    ``fired_by`` with every event of a run a schedule or a trigger started (null: submitted)."""
    id: str
    event: EventName
    run: str
    tenant: str
    status: str
    branch: str | None
    commit: str | None
    error: str | None
    created: str | None
    started: str | None
    ended: str | None
    at: str | None
    question: QuestionBody | None = None
    pushed: bool | None = None
    push: PushBody | None = None
    fired_by: FiredBody | None = None


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Flower-Signature-256`` value of ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def _secret(tenant: Tenant, path: str) -> bytes:
    """The tenant's webhook secret (its file's contents, whitespace around it stripped); ValueError saying what is
    wrong with the file, never what is in it."""
    file = Path(path)
    try:
        with file.open("rb") as f:
            raw = f.read(SECRET_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"the webhook secret file of tenant {tenant.name} ({file}) is missing; ask the operator to "
                         "create it") from None
    except OSError as e:
        raise ValueError(f"the webhook secret file of tenant {tenant.name} ({file}) cannot be read "
                         f"({e.strerror or type(e).__name__}); ask the operator to fix it") from None
    secret = raw.strip()
    if not secret or len(raw) > SECRET_BYTES:
        raise ValueError(f"the webhook secret file of tenant {tenant.name} ({file}) is empty or larger than "
                         f"{SECRET_BYTES} bytes; put one secret in it")
    return secret


class Webhooks:
    """The delivery queue (rows in the registry) and the task that sends it."""

    def __init__(self, deliveries: DeliveriesTable, tenants: Tenants, *, retry_s: float = 15.0, slots: int = SLOTS,
                 tenant_slots: int = TENANT_SLOTS, clock: Clock = SYSTEM,
                 fired: Callable[[str], Fire | None] = lambda run_id: None) -> None:
        self.clock = clock
        self._fired = fired  # what started a run (the schedules table), for the bodies' ``fired_by``
        self.deliveries = deliveries
        self.tenants = tenants
        self.retry_s = retry_s
        self.slots = slots
        self.tenant_slots = tenant_slots
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._flying: dict[str, asyncio.Task[None]] = {}  # run → its delivery being sent
        self._tenants_flying: Counter[str] = Counter()  # tenant → its deliveries being sent
        self._client: httpx.AsyncClient | None = None

    # -- queueing (the scheduler's side: a row, then on) -----------------------------------------------
    def emit(self, event: EventName, run: Run, *, key: str = "", question: QuestionBody | None = None,
             push: Push | None = None) -> None:
        """Queue ``event`` of ``run`` for its tenant's webhook (nothing when the tenant has none). ``key`` tells
        two events of one name apart (a question's event number); an event queued twice is sent once."""
        tenant = self.tenants.get(run.tenant)
        if tenant is None or tenant.webhook is None:
            return
        now = self.clock.now()
        delivery_id = f"{run.id}.{event}" + (f".{key}" if key else "")
        body = WebhookBody(id=delivery_id, event=event, run=run.id, tenant=run.tenant, status=run.status,
                           branch=run.branch, commit=run.commit_sha, error=run.error, created=iso(run.created),
                           started=iso(run.started), ended=iso(run.ended), at=iso(now), question=question)
        fire = self._fired(run.id)
        if fire is not None:
            body.fired_by = FiredBody(by=fire.fired_by, schedule=fire.schedule, tick=iso(fire.tick))
        if event == "run.ended":
            body.pushed = push is not None and push.state == "pushed"
            body.push = None if push is None else PushBody(state=push.state, url=push.url, ref=push.ref,
                                                           commit=push.commit, error=push.error)
        if self.deliveries.add(Delivery(id=delivery_id, tenant=run.tenant, run=run.id, event=event,
                                               body=msgspec.json.encode(body), created=now, next_try=now)):
            self.wake()

    def wake(self) -> None:
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    # -- sending ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._client = httpx.AsyncClient(timeout=TRY_S, follow_redirects=False, trust_env=False,
                                         headers={"User-Agent": "flower-service"})
        self._task = self._loop.create_task(self._run(), name="flower-webhooks")

    async def stop(self) -> None:
        """Stop sending; what is pending stays in the registry for the next service."""
        tasks = [t for t in [self._task, *self._flying.values()] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._flying.clear()
        self._tenants_flying.clear()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            try:
                wait = self._send_due()
            except Exception:  # noqa: BLE001 - the registry may be busy or the disk full: try again shortly
                log.exception("webhook.queue_failed")
                wait = max(1.0, self.retry_s)
            try:  # not wait_for: on 3.11 it swallows a stop that meets a wake-up (service/control/scheduler.py)
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _send_due(self) -> float:
        """Start the deliveries that are due (each run's oldest pending one), as many as the slots leave room for —
        the tenant's and all tenants' together; seconds until the next is due."""
        now = self.clock.now()
        wait = 60.0
        seen: set[str] = set()
        for d in self.deliveries.list(state="pending", limit=10_000, oldest_first=True):
            if d.run in seen:
                continue
            seen.add(d.run)
            if d.run in self._flying:
                continue
            due = (d.next_try or 0.0) - now
            if due > 0:
                wait = min(wait, due)
            elif len(self._flying) < self.slots and self._tenants_flying[d.tenant] < self.tenant_slots:
                assert self._loop is not None
                claim = now + CLAIM_S
                if not self.deliveries.claim(d, now=now, until=claim):
                    continue  # another replica sends it
                task = self._loop.create_task(self._deliver(d, claim), name=f"flower-webhook-{d.id}")
                self._flying[d.run] = task
                self._tenants_flying[d.tenant] += 1
                task.add_done_callback(functools.partial(self._landed, d.run, d.tenant))
        return max(0.01, wait)

    def _landed(self, run: str, tenant: str, _task: asyncio.Task[None]) -> None:
        if self._flying.pop(run, None) is not None:
            self._tenants_flying[tenant] -= 1
            if self._tenants_flying[tenant] <= 0:
                del self._tenants_flying[tenant]
        if self._wake is not None:
            self._wake.set()

    async def _deliver(self, d: Delivery, claim: float) -> None:
        """One try of ``d`` within its deadline, and its outcome stored while ``claim`` is still its: delivered,
        given up, or when to try again."""
        fields: dict[str, object] = {"tenant": d.tenant, "run": d.run, "delivery": d.id, "webhook_event": d.event}
        left = claim - MARGIN_S - self.clock.now()  # the try ends MARGIN_S before its claim does
        if left <= 0:  # this sender was paused since it claimed: the claim lapses untried, and it is due again then
            log.warning("webhook.claim_too_late", **fields)
            return
        try:
            async with asyncio.timeout(min(TRY_S, left)):
                status, error, retry = await self._post(d)
        except TimeoutError:
            status, error, retry = None, f"no answer from the webhook within {TRY_S:g} s (connect, send, status " \
                                         "line and headers)", True
        d.attempts += 1
        d.last_status, d.last_error = status, error
        now = self.clock.now()
        if error is None:
            d.state, d.next_try, d.ended = "delivered", None, now
        elif not retry or d.attempts >= TRIES:
            d.state, d.next_try, d.ended = "failed", None, now
        else:
            d.next_try = now + self.retry_s * 2 ** (d.attempts - 1)
        if not await asyncio.to_thread(functools.partial(self.deliveries.tried, d, claim=claim)):
            log.warning("webhook.claim_lost", **fields, attempts=d.attempts, status=status)  # another's try now
            return
        fields |= {"attempts": d.attempts, "status": status}
        if d.state == "delivered":
            log.info("webhook.delivered", **fields)
        elif d.state == "failed":
            log.warning("webhook.failed", **fields, error=error)
        else:
            log.info("webhook.retrying", **fields, error=error, in_s=round(d.next_try - now, 3) if d.next_try else None)

    async def _post(self, d: Delivery) -> tuple[int | None, str | None, bool]:
        """(HTTP status or None, why it failed or None, whether another try may help)."""
        tenant = self.tenants.get(d.tenant)
        if tenant is None or tenant.webhook is None:
            return None, f"tenant {d.tenant} has no webhook_url any more; the delivery was dropped", False
        try:
            secret = await asyncio.to_thread(_secret, tenant, tenant.webhook.secret_file)
        except ValueError as e:
            return None, str(e), True  # the operator may fix the file before the last try
        headers = {"Content-Type": "application/json", "X-Flower-Event": d.event, "X-Flower-Delivery": d.id,
                   SIGNATURE_HEADER: sign(secret, d.body)}
        assert self._client is not None
        try:
            async with self._client.stream("POST", tenant.webhook.url, content=d.body, headers=headers) as answer:
                code = answer.status_code  # the body is not read: nothing of it is needed
        except httpx.HTTPError as e:
            return None, f"no answer from the webhook ({type(e).__name__}: {' '.join(str(e).split())[:300]})", True
        if 200 <= code < 300:
            return code, None, False
        if 300 <= code < 400:
            return code, f"the webhook answered {code} (a redirect, not followed): point webhook_url at the final " \
                         "address", False
        return code, f"the webhook answered {code}", code >= 500 or code in RETRIED

"""GET /v1/runs/{id}/events: the run's events as server-sent events (the replay itself is events.replay).

A tenant holds at most ``max_streams_per_tenant`` streams, across every replica: the handler takes one of its slots
in the registry (``service.control.streams``; the check and the count are one write, so concurrent opens cannot all pass one
check), and the route's middleware gives the slot back when the response is done with: streamed to its end, cut by
the client, or never sent at all (a client gone before the body started).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import msgspec
from litestar import Request, get
from litestar.di import Provide
from litestar.exceptions import ValidationException
from litestar.params import HeaderParameter, Parameter
from litestar.response import ServerSentEvent, ServerSentEventMessage
from litestar.types import ASGIApp, Receive, Scope, Send

from ..control.events import Ended, KeepAlive, Numbered, replay
from ..registry import Run
from ..tenants import Tenant
from .deps import ClockDep, ConfigDep, ControlDep, RunDep, RunsDep, SlotsDep, TenantDep, provide_run
from .errors import Gone, TooManyRequests, errors
from .examples import EVENTS, ok

__all__ = ["events", "KEEPALIVE_S"]

KEEPALIVE_S = 15.0
_SLOT = "flower.stream_slot"  # in the request's scope state: how the handler's reserved slot is given back


def _give_back_slot(app: ASGIApp) -> ASGIApp:
    """Around the events route: whatever became of the response, the stream slot its handler took goes back."""

    async def around(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await app(scope, receive, send)
        finally:
            release: Callable[[], Awaitable[None]] | None = scope.get("state", {}).pop(_SLOT, None)
            if release is not None:
                await release()

    return around


def _message(item: Numbered | KeepAlive | Ended) -> ServerSentEventMessage:
    if isinstance(item, KeepAlive):
        return ServerSentEventMessage(comment="keep-alive", data=None)  # a comment alone: Litestar's default
        # data="" adds an empty `data:` line, on which every EventSource dispatches an empty message
    if isinstance(item, Ended):
        return ServerSentEventMessage(data=json.dumps({"status": item.status, "events": item.events}), event="end")
    data = json.dumps({"seq": item.seq, **msgspec.structs.asdict(item.event)}, ensure_ascii=False, default=str)
    return ServerSentEventMessage(data=data, event=item.event.kind, id=item.seq)  # a kind is [a-z0-9_.-]


@get("/runs/{run_id:str}/events", tags=["runs"], media_type="text/event-stream", operation_id="stream_run_events",
     dependencies={"run": Provide(provide_run, sync_to_thread=False)}, middleware=[_give_back_slot],
     summary="The run's events: every line from `after` (or Last-Event-ID) on, then live; `end` last",
     responses={**ok(200, EVENTS, "text/event-stream: `id` is the event's number, `event` its kind, `data` its "
                     "JSON ({seq, kind, text, payload, …}); an `ask` event's payload.id is the question id",
                     media_type="text/event-stream"),
                **errors(400, 404, 410, 429)})
async def events(request: Request[Any, Any, Any], run: RunDep, tenant: TenantDep, runs: RunsDep,
                 control: ControlDep, slots: SlotsDep, config: ConfigDep, clock: ClockDep,
                 after: Annotated[int | None, Parameter(ge=0)] = None,
                 last_event_id: Annotated[str | None, HeaderParameter(name="Last-Event-ID", required=False)] = None,
                 ) -> ServerSentEvent:
    """Server-sent events: what the run wrote so far, then each new event as it comes, then an `end` event
    with the final status. Reconnect with `Last-Event-ID` (or `?after=`) to miss nothing and repeat nothing."""
    if after is None:
        last = (last_event_id or "").strip()
        if last and not re.fullmatch(r"[0-9]{1,18}", last):
            raise ValidationException("Last-Event-ID must be the number of the last event received")
        after = int(last) if last else 0
    if run.deleted is not None:
        raise Gone(f"run {run.id} was deleted, and its events with it")
    folder = control.layout(run).dir
    cap = config.max_streams_per_tenant
    slot = await asyncio.to_thread(slots.take, tenant.name, cap)
    if slot is None:
        raise TooManyRequests(f"tenant {tenant.name} already has {cap} event streams open (at most {cap}, "
                              "counted across the service's replicas); close one first", headers={"Retry-After": "5"})
    queue = control.subscribe(run.id)  # before the replay: nothing falls between the two

    async def release() -> None:  # once: the middleware takes it out of the scope
        control.unsubscribe(run.id, queue)
        await asyncio.to_thread(slots.give_back, slot)

    request.scope.setdefault("state", {})[_SLOT] = release

    def over() -> str | None:
        current = runs.get(run.id)
        if current is None:
            return "unknown"
        return current.status if current.terminal else None

    async def stream() -> AsyncIterator[ServerSentEventMessage]:
        async for item in replay(folder, after, queue, over, keepalive_s=KEEPALIVE_S, clock=clock):
            yield _message(item)

    return ServerSentEvent(stream(), headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

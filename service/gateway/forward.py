"""Forwarding: a request let through goes to its tenant's upstream with the tenant's credentials swapped in, and
the answer streams back as it comes — read on the way (usage and cost, the tool calls the model asks for, the guard
denials and spills in what the CLI sends back: the wire audit) and read to its end even when the run hung up, so
the meter counts what the upstream reported. The policy it applies is ``admission``'s; the bytes it writes are
framed with h11 on the connection ``server`` hands it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import h11
import msgspec

from ..logging import get_logger
from .admission import Refuse, on_ask, on_budget, passed_headers, undecodable
from .grant import AuditHook, Grant, Held, Meter
from .streaks import Streaks
from .upstream import Upstream, UpstreamError, UpstreamResponse
from .wire import Ask, ResponseReader, Usage, contents, cost_of, most_cost, tool_results

if TYPE_CHECKING:
    from ..tracing.wire import WireSpans

__all__ = ["Forwarder", "send", "error_body", "refusal", "STALL_S", "DRAIN_S"]

STALL_S = 120.0  # a run that reads nothing of its answer for this long is treated as gone
DRAIN_S = 600.0  # how long an answer is still read from the upstream after the run hung up (then: what was seen)
_HOP_BACK = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "trailer"}
_TOOL_MEMORY = 4096

log = get_logger("flower.service.gateway")
audit_log = get_logger("flower.audit")


def error_body(status: int, kind: str, message: str) -> tuple[int, bytes]:
    return status, json.dumps({"type": "error", "error": {"type": kind, "message": f"flower gateway: {message}"}}
                              ).encode()


def refusal(refuse: Refuse) -> tuple[int, bytes]:
    return error_body(refuse.status, refuse.error, refuse.why)


async def send(conn: h11.Connection, writer: asyncio.StreamWriter, status: int, body: bytes, *,
               close: bool = False) -> None:
    """A whole answer of ours. ``close``: the connection ends after it, and says so (a client must not send
    another on it)."""
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    writer.write(conn.send(h11.Response(status_code=status, headers=[*headers, *([("connection", "close")]
                                                                                  if close else [])])))
    writer.write(conn.send(h11.Data(data=body)))
    writer.write(conn.send(h11.EndOfMessage()))
    await writer.drain()


async def _write(writer: asyncio.StreamWriter, data: bytes) -> bool:
    """Pass ``data`` on to the run; False once it has gone away — or stopped reading for ``STALL_S``, which would
    otherwise stop the upstream being read too."""
    try:
        writer.write(data)
        if writer.transport.get_write_buffer_size():
            await asyncio.wait_for(writer.drain(), STALL_S)
        else:
            await writer.drain()
    except TimeoutError:
        writer.transport.abort()
        return False
    except OSError:  # ConnectionResetError, BrokenPipeError: the run hung up
        return False
    return True


def _header(req: h11.Request, name: bytes) -> str:
    """A header the run's CLI sets (its value is the run's: cut, never trusted), or ""."""
    return next((v.decode("latin-1")[:200] for k, v in req.headers if k == name), "")


def _decode(body: bytes) -> dict[str, object]:
    try:
        value = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


class Forwarder:
    """A request's way to the upstream and its answer's way back. ``meter`` admits every Messages call and settles
    its answer (None: nothing is held); ``on_audit`` hears of every count the wire audit adds; ``spans`` (traces
    configured) hears of every model call read to its end and every tool result sent back."""

    def __init__(self, upstream: Upstream, streaks: Streaks, *, prices: Mapping[str, tuple[float, float]],
                 meter: Meter | None) -> None:
        self.upstream = upstream
        self.prices = dict(prices)
        self.meter = meter
        self.on_audit: AuditHook | None = None
        self.spans: WireSpans | None = None
        self._streaks = streaks

    async def forward(self, conn: h11.Connection, writer: asyncio.StreamWriter, grant: Grant, req: h11.Request,
                      target: str, body: bytes) -> None:
        messages = target.split("?", 1)[0] == "/v1/messages"
        if grant.on_first is not None:
            first, grant.on_first = grant.on_first, None
            first()
        try:
            ask = msgspec.json.decode(body, type=Ask)
        except (msgspec.DecodeError, RecursionError) as e:
            return await send(conn, writer, *refusal(undecodable(str(e))))
        found = contents(ask)  # one walk of the conversation's blocks, for the egress check and the most it costs
        if isinstance(decided := on_ask(grant, ask, found.fetched), Refuse):
            self._streaks.refused(grant, decided)
            return await send(conn, writer, *refusal(decided))
        held: Held | None = None
        meter = self.meter if messages else None  # what else the API has (count_tokens) costs nothing
        if meter is not None:
            admitted = on_budget(await meter.admit(grant, most_cost(ask, len(body), self.prices, found.unbounded)))
            if isinstance(admitted, Refuse):
                self._streaks.refused(grant, admitted)
                return await send(conn, writer, *refusal(admitted))
            held = admitted
        agent = _header(req, b"x-claude-code-agent-id") or "main"
        who = {"tenant": grant.tenant, "run": grant.run_id, "agent": agent, "source": "wire"}
        if messages:  # the denials and spills the CLI sends back, written before the call goes: a crash loses none
            # a long conversation is megabytes of JSON: parsed off the loop
            request = await asyncio.to_thread(_decode, body) if len(body) > 256 * 1024 else _decode(body)
            self._results(grant, request, who)
            if self.spans is not None:
                self.spans.results(grant, tool_results(request))
        started, began = time.monotonic(), time.time()
        try:
            resp = await self.upstream.post(grant.upstream + target, passed_headers(req.headers, grant.auth), body)
        except UpstreamError as e:
            if meter is not None and held is not None:
                await meter.settle(grant, held, None)
            log.warning("gateway.upstream_failed", tenant=grant.tenant, run=grant.run_id, error=str(e)[:300])
            return await send(conn, writer, *error_body(502, "api_error", f"the upstream did not answer ({e})"))
        reader = ResponseReader(stream=resp.header("content-type").startswith("text/event-stream"))
        try:
            await self._relay(conn, writer, grant, resp, reader)
        finally:
            resp.close()
            reader.close()
            if messages:
                self._calls(grant, reader, who)  # at once: the CLI's next request answers these
                usage = self._meter(grant, reader, ask, resp.status_code, time.monotonic() - started)
                if self.spans is not None:
                    self.spans.model_call(grant, session=_header(req, b"x-claude-code-session-id"), agent=agent,
                                          model=reader.model or ask.model, request_model=ask.model, usage=usage,
                                          status=resp.status_code, start=began, end=time.time(),
                                          calls=[(c.id, c.tool) for c in reader.calls])
                if meter is not None and held is not None:
                    await meter.settle(grant, held, usage)

    async def _relay(self, conn: h11.Connection, writer: asyncio.StreamWriter, grant: Grant, resp: UpstreamResponse,
                     reader: ResponseReader) -> None:
        """The answer back to the run as it comes, and into ``reader`` whether or not the run is still there: a run
        that hung up is no longer written to, but the answer is read to its end (for ``DRAIN_S`` at most) so the
        meter counts what the upstream reported, not what the run read."""
        listening = await _write(writer, conn.send(h11.Response(status_code=resp.status_code, headers=[
            (k, v) for k, v in resp.headers if k.lower() not in _HOP_BACK])))
        gone_at = None if listening else time.monotonic()
        async for chunk in resp.chunks():
            if listening:
                listening = await _write(writer, conn.send(h11.Data(data=chunk)))
            reader.feed(chunk)
            if not listening:
                gone_at = gone_at or time.monotonic()
                if time.monotonic() - gone_at > DRAIN_S:
                    log.warning("gateway.drain_cut", tenant=grant.tenant, run=grant.run_id, seconds=DRAIN_S)
                    return
        if listening:
            await _write(writer, conn.send(h11.EndOfMessage()))

    def _calls(self, grant: Grant, reader: ResponseReader, who: dict[str, str]) -> None:
        """The tool calls the model asked for: the wire audit's own record, which the results are matched to."""
        for call in reader.calls:
            grant.counts["tool_call"] += 1
            grant.tools[call.id] = call.tool
            while len(grant.tools) > _TOOL_MEMORY:
                grant.tools.popitem(last=False)
            audit_log.info("audit.tool_call", tool=call.tool, tool_use_id=call.id, **who)
        if reader.calls and self.on_audit is not None:
            self.on_audit(grant)

    def _results(self, grant: Grant, request: dict[str, object], who: dict[str, str]) -> None:
        """Denials and spills in what the CLI sent back — only for calls the model really made, each once (a retry
        re-sends the same results; a forged result names no call the wire saw)."""
        counted = False
        for result in tool_results(request):
            tool = grant.tools.pop(result.tool_use_id, None)
            if tool is None or result.kind not in ("deny", "spill"):
                continue
            grant.counts[result.kind] += 1
            counted = True
            if result.kind == "deny":
                audit_log.warning("audit.deny", tool=tool, tool_use_id=result.tool_use_id,
                                  meaning=f"a guard in the run refused {tool} (reason: its words to the model)",
                                  reason=" ".join(result.text.split())[:500], **who)
            else:
                audit_log.info("audit.spill", tool=tool, tool_use_id=result.tool_use_id,
                               pointer=" ".join(result.text.split())[:300], **who)
        if counted and self.on_audit is not None:
            self.on_audit(grant)

    def _meter(self, grant: Grant, reader: ResponseReader, ask: Ask, status: int, seconds: float) -> Usage:
        """One answer's usage and cost, as the upstream reported it, onto the grant."""
        usage = reader.usage
        model = reader.model or ask.model
        usage.cost_usd = cost_of(model, usage, self.prices)
        log.debug("gateway.answer", tenant=grant.tenant, run=grant.run_id, status=status, model=model[:100],
                  input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, seconds=round(seconds, 4))
        grant.usage.add(usage)
        return usage

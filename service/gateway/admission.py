"""Whether a request goes on, decided from what is known of it — no socket, no I/O, no clock: the policy layer.

The connection layer (``server``) asks ``on_head`` before a byte of the body is read (nobody makes the service
buffer for a token that is not live, a path that is not forwarded, a run over its bounds); the forwarding layer
(``forward``) asks ``on_ask`` once the body is decoded (what the provider would fetch or run on the network for the
run), then ``on_budget`` with the meter's answer. Each answers ``THROUGH`` or a ``Refuse``: the status, the API's
error type, the sentence the run's model reads, and how it is logged (``Audit``; a ``bound`` of issue 21, or the
egress kinds). ``passed_headers`` is what of a run's headers reaches the tenant's provider.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal

from .grant import Grant, Held, Refused
from .wire import Ask, server_tools

__all__ = ["Audit", "Bound", "Refuse", "EgressRefused", "Through", "THROUGH", "Decision", "Head", "on_head",
           "on_ask", "on_budget", "too_large", "undecodable", "passed_headers", "PASSED", "BETAS", "FORWARDED",
           "MAX_BODY", "MAX_IN_FLIGHT", "MAX_RUN_BODY_BYTES", "MAX_PASSED_VALUE"]

MAX_BODY = 64 * 1024 * 1024
MAX_IN_FLIGHT = 16  # a run's model calls at once: what it can make the service buffer
MAX_RUN_BODY_BYTES = 96 * 1024 * 1024  # the bodies of a run's open requests together: one MAX_BODY and half again
FORWARDED = ("/v1/messages", "/v1/messages/count_tokens")
# The run's headers that go on: the Messages API's, and the informational ones the bundled CLI sends (checked against
# the scripted model: version and client names, its session and agent ids, its retry and timeout figures).
PASSED = frozenset({
    "anthropic-version", "content-type", "accept", "user-agent", "x-app", "anthropic-dangerous-direct-browser-access",
    "x-claude-code-session-id", "x-claude-code-agent-id", "x-stainless-arch", "x-stainless-lang", "x-stainless-os",
    "x-stainless-package-version", "x-stainless-retry-count", "x-stainless-runtime", "x-stainless-runtime-version",
    "x-stainless-timeout"})
# Betas that change how the model answers, not what the provider does for the run (the bundled CLI sends these; not
# files, MCP, skills, batches or any tool the provider runs itself)
BETAS = frozenset({
    "claude-code-20250219", "interleaved-thinking-2025-05-14", "context-management-2025-06-27",
    "per-turn-control-2026-07-01", "mid-conversation-tool-changes-2026-07-01", "thinking-token-count-2026-05-13",
    "advanced-tool-use-2025-11-20", "effort-2025-11-24", "thinking-display-updates-2026-08-18",
    "fine-grained-tool-streaming-2025-05-14", "context-1m-2025-08-07", "prompt-caching-scope-2026-01-05",
    "extended-cache-ttl-2025-04-11", "redact-thinking-2026-02-12", "structured-outputs-2025-12-15",
    "token-counting-2024-11-01", "claude-code-side-query-2026-09-29"})
MAX_PASSED_VALUE = 256  # bytes of a passed header's value: the CLI's are names, versions and ids
_PRINTABLE = re.compile(rb"[\x20-\x7e]*")  # a passed header's value: visible ASCII and spaces, nothing else

Bound = Literal["run_connections", "peer_connections", "tcp_connections", "head_timeout", "body_timeout",
                "in_flight", "run_body_bytes", "budget_held"]


class Audit(Enum):
    """How a refusal is logged."""

    UNAUTHORISED = "unauthorised"
    """``gateway.refused``: no live run to name (the token is nobody's on this socket)."""
    NONE = "none"
    """Not logged: the request is malformed, not a policy's refusal (a path not forwarded, a body not JSON)."""
    DENIED = "denied"
    """``audit.gateway_denied`` with the sentence, once per streak of this status by this run."""
    BOUND = "bound"
    """``gateway.bound``: a bound of the run's (``Refuse.bound``), once per streak."""
    EGRESS = "egress"
    """``audit.egress_refused``: what the provider would have fetched or run, once per streak of these kinds."""


@dataclass(frozen=True)
class Through:
    """Let through (so far: the next layer may still refuse)."""


THROUGH: Final = Through()


@dataclass(frozen=True)
class Refuse:
    """Not let through: ``status`` and the API's ``error`` type, ``why`` (the sentence the run's model reads)."""

    status: int
    error: str
    why: str
    audit: Audit
    bound: Bound | None = None


@dataclass(frozen=True)
class EgressRefused(Refuse):
    """What the provider would reach the network (or the tenant's files) for: the audit's kinds, tools and sources
    (the kinds are a fixed few, so a streak is keyed by them — the names are the run's to vary)."""

    kinds: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    sources: Mapping[str, Sequence[str]] | None = None


Decision = Through | Refuse


@dataclass(frozen=True)
class Head:
    """A request's head as the gateway has read it: the live run its token belongs to (None: none on this socket),
    what it asks for, the bytes its body will hold and those the run's open requests hold already."""

    grant: Grant | None
    method: str
    path: str
    body_size: int
    bodies_held: int


def on_head(head: Head) -> Decision:
    """Before the body: a live token of this run, a forwarded path, a run that may still spend, within its bounds."""
    grant = head.grant
    if grant is None:
        return Refuse(401, "authentication_error", "this token belongs to no live run on this socket",
                      Audit.UNAUTHORISED)
    if head.method != "POST" or head.path not in FORWARDED:
        return Refuse(404, "not_found_error", f"only POST {' and '.join(FORWARDED)} are forwarded", Audit.NONE)
    if grant.refused:
        return Refuse(403, "permission_error", grant.refused, Audit.DENIED)
    if grant.in_flight >= MAX_IN_FLIGHT:
        return Refuse(429, "rate_limit_error", f"more than {MAX_IN_FLIGHT} model calls of this run at once",
                      Audit.BOUND, "in_flight")
    if head.body_size > MAX_BODY:
        return Refuse(413, "request_too_large", "request body over 64 MB", Audit.DENIED)
    if head.bodies_held + head.body_size > MAX_RUN_BODY_BYTES:
        return Refuse(429, "rate_limit_error",
                      f"this run's model calls at once carry over {MAX_RUN_BODY_BYTES >> 20} MB", Audit.BOUND,
                      "run_body_bytes")
    return THROUGH


def too_large() -> Refuse:
    """A body that grew past ``MAX_BODY`` while it was read (chunked: no length said so before)."""
    return Refuse(413, "request_too_large", "request body over 64 MB", Audit.DENIED)


def undecodable(error: str) -> Refuse:
    """A body that is not a Messages API request (``error``: what the decoder said)."""
    return Refuse(400, "invalid_request_error", (
        f"the body is not a Messages API request ({error[:200]}); send a JSON object with the model, max_tokens "
        "and messages"), Audit.NONE)


def on_ask(grant: Grant, ask: Ask, fetched: Mapping[str, list[str]]) -> Decision:
    """Once the body is decoded: nothing the provider would fetch (``fetched``: URL or file sources, by kind) or
    run (server-side tools) for a run that may not use it; and a run that may still spend (its budget may have
    ended while the body came)."""
    tools = [name for name in server_tools(ask) if name not in grant.server_tools]
    sources = {kind: blocks for kind, blocks in fetched.items() if kind not in grant.server_tools}
    if tools or sources:
        return _egress(tools, sources)
    if grant.refused:
        return Refuse(403, "permission_error", grant.refused, Audit.DENIED)
    return THROUGH


def _egress(tools: list[str], sources: dict[str, list[str]]) -> EgressRefused:
    kinds = (("server_tools",) if tools else ()) + tuple(sorted(sources))
    shown = {k: v[:10] for k, v in sources.items()}
    if tools:
        return EgressRefused(403, "permission_error", (
            f"server-side tool(s) {', '.join(tools[:20])} are not forwarded for this run: the provider would run "
            "them on the network for it, so its tenant needs `egress = \"open\"` and to list them in `server_tools` "
            "in the tenants file"), Audit.EGRESS, kinds=kinds, tools=tuple(tools[:20]), sources=shown)
    what = " and ".join(f"{'URL' if kind == 'url_sources' else 'file'} sources ({', '.join(blocks[:10])})"
                        for kind, blocks in sources.items())
    return EgressRefused(403, "permission_error", (
        f"content with {what} is not forwarded for this run: the provider would fetch it for the run (a URL reaches "
        "any host; a file is what was uploaded with its tenant's key), so send the content itself (base64 or text) "
        "instead, or its tenant needs `egress = \"open\"` and to list "
        f"{' and '.join(f'`{k}`' for k in sources)} in `server_tools` in the tenants file"),
        Audit.EGRESS, kinds=kinds, tools=tuple(tools[:20]), sources=shown)


def on_budget(admitted: Held | Refused) -> Held | Refuse:
    """The meter's answer: a hold goes on; a final refusal is 403 (the run may spend nothing more), any other 429
    (calls in flight hold the rest of a budget for now: the CLI retries)."""
    if isinstance(admitted, Held):
        return admitted
    if admitted.final:
        return Refuse(403, "permission_error", admitted.why, Audit.DENIED)
    return Refuse(429, "rate_limit_error", admitted.why, Audit.BOUND, "budget_held")


def passed_headers(headers: Sequence[tuple[bytes, bytes]], auth: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """What goes upstream: the run's headers in ``PASSED`` and its betas in ``BETAS`` (joined with the tenant's),
    then the tenant's own — never a run's header with a name the tenant sets. A run's value is its own bytes, read
    by the provider's logs and whatever displays them: one with a control character (an escape sequence, a NUL)
    or over ``MAX_PASSED_VALUE`` bytes is dropped, not passed on."""
    ours = {name for name, _ in auth}
    out: list[tuple[str, str]] = []
    betas: list[str] = []
    for k, v in headers:
        name = k.decode("latin-1")
        if name == "anthropic-beta":
            betas += [b for b in (x.strip() for x in v.decode("latin-1").split(",")) if b in BETAS]
        elif (name in PASSED and name not in ours and len(v) <= MAX_PASSED_VALUE
              and _PRINTABLE.fullmatch(bytes(v))):
            out.append((name, v.decode("ascii")))
    for name, value in auth:
        if name == "anthropic-beta":
            betas += [x.strip() for x in value.split(",") if x.strip()]
        else:
            out.append((name, value))
    if betas:
        out.append(("anthropic-beta", ",".join(dict.fromkeys(betas))))
    out.append(("accept-encoding", "identity"))
    return out

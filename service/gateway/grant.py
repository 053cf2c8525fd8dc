"""A live run as the gateway knows it (``Grant``), its token, its tenant's upstream, and the meter's contract: what
every layer of the data plane shares, and nothing that touches a socket."""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .wire import Usage

__all__ = ["Grant", "Held", "Refused", "Meter", "AuditHook", "ResolveHook", "new_token", "upstream_of",
           "SOCKET_NAME", "SECRET_KEYS"]

SOCKET_NAME = "gateway.sock"
# The tenant's secrets: they stay here (what a run gets of its credentials file is service/control/runenv.py's allow-list).
SECRET_KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS",
               "ANTHROPIC_BASE_URL")


def new_token() -> tuple[str, str]:
    """(token, sha256 hex): the token goes to the run's env file, only the hash is kept."""
    token = "flower-run-" + secrets.token_urlsafe(32)
    return token, hashlib.sha256(token.encode()).hexdigest()


def upstream_of(values: Mapping[str, str]) -> tuple[str, list[tuple[str, str]]]:
    """The tenant's upstream URL and the headers that authenticate it there, from its credentials file."""
    base = (values.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com").rstrip("/")
    headers: list[tuple[str, str]] = []
    if values.get("ANTHROPIC_API_KEY"):
        headers.append(("x-api-key", values["ANTHROPIC_API_KEY"]))
    elif values.get("ANTHROPIC_AUTH_TOKEN"):
        headers.append(("authorization", f"Bearer {values['ANTHROPIC_AUTH_TOKEN']}"))
    elif values.get("CLAUDE_CODE_OAUTH_TOKEN"):
        headers.append(("authorization", f"Bearer {values['CLAUDE_CODE_OAUTH_TOKEN']}"))
        headers.append(("anthropic-beta", "oauth-2025-04-20"))
    for line in (values.get("ANTHROPIC_CUSTOM_HEADERS") or "").splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            headers.append((name.strip().lower(), value.strip()))
    return base, headers


@dataclass(eq=False)
class Grant:
    """One live run as the gateway knows it."""

    run_id: str
    tenant: str
    token_hash: str
    upstream: str
    auth: list[tuple[str, str]]
    usage: Usage = field(default_factory=Usage)
    counts: Counter[str] = field(default_factory=Counter)
    refused: str | None = None
    """Set when the run may spend no more (its budget): every request is answered 403 with this sentence."""
    in_flight: int = 0
    held_back: tuple[float, str] | None = None
    """Until when (monotonic) and why its calls are refused for now without asking the registry: a run that loops on
    a 429 costs the shared database nothing more than a few checks a second."""
    server_tools: frozenset[str] = frozenset()
    """The server-side tools this run may use: its tenant's ``server_tools`` when its egress is open, else none."""
    tools: OrderedDict[str, str] = field(default_factory=OrderedDict)
    on_first: Callable[[], None] | None = None
    """Called once, when the run's first model request arrives (the service's start histogram)."""
    budget_usd: float | None = None
    """The run's own budget (its schedule's), under its tenant's ``budget_usd.run``; None: the tenant's alone."""

    def __repr__(self) -> str:  # never the auth headers
        return f"Grant({self.run_id!r}, tenant={self.tenant!r})"


@dataclass(frozen=True)
class Held:
    """A model call let through: it holds the most it can cost until ``Meter.settle``."""

    id: str | None
    """The hold's name in the registry (None: the run has no budget, so nothing was held)."""
    day: str


@dataclass(frozen=True)
class Refused:
    """A model call not let through, and why (a sentence the run's model reads)."""

    why: str
    final: bool
    """The run may spend nothing more (403; ``grant.refused`` is set) — else calls in flight hold the rest of a
    budget for now (429: the CLI retries once they are answered)."""


class Meter(Protocol):
    """Money, on the service's side of the wall (``service.gateway.budgets``): every Messages call is admitted before it is
    forwarded and settled once its answer was read to the end."""

    async def admit(self, grant: Grant, most: float) -> Held | Refused:
        """Let the call through holding ``most`` USD against the run's budgets, or refuse it."""
        ...

    async def settle(self, grant: Grant, held: Held, usage: Usage | None) -> None:
        """What the upstream reported for the call (None: nothing came back) replaces what it held."""
        ...


AuditHook = Callable[[Grant], None]
"""After the wire audit counted something of a run's (a tool call, a denial, a spill): ``grant.counts`` changed."""
ResolveHook = Callable[[str], Awaitable["Grant | None"]]
"""A token's sha256 no grant holds, on the TCP listener: the live run it belongs to (looked up), or None."""

"""The model gateway: the only way a run reaches the model, and the reason the tenant's key never enters it.

Each run gets a token of its own (in its env file) and, on the Docker and local backends, a unix socket of
its own in a service-owned folder mounted read-only into the sandbox (the runner bridges it to a loopback
port, ``sandbox.bridge``); on Kubernetes the runs reach a TCP port of the service. A request is answered
only when its token belongs to a live run — and, on a run's socket, to *that* run. The gateway then swaps
in the tenant's credentials (API key, auth token, OAuth token, custom headers), forwards to the tenant's
upstream and streams the answer back as it comes (SSE included), reading it on the way: usage and cost per
run (``service.wire``), the tool calls the model asks for, the guard denials and spills in what the CLI sends
back — the audit a run cannot suppress or forge. Only the Messages API is forwarded.

What reaches the tenant's provider is allowed by name, never merely not denied: the Messages API's own headers, the
bundled CLI's harmless ones and the betas in ``BETAS`` from the run, the tenant's credentials and custom headers
from us (a run's header of the same name is dropped); server-side tools (``wire.server_tools``) and content the
provider fetches (a URL or file source anywhere in the request, ``wire.contents``) only when the tenant lists
them and its egress is open — the provider would otherwise reach the network for a closed-egress run.
Money is counted from the upstream's side: an answer is read to its end even when the run hung up
(``_relay``), and a call is let through only when the most it can cost (``wire.most_cost``) fits in the run's
budgets beside what the calls in flight hold (``admit``), so concurrent calls never pass a budget.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import resource
import secrets
import socket
import stat
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import h11
import msgspec

from .logging import get_logger
from .upstream import Upstream, UpstreamError, UpstreamResponse
from .wire import Ask, ResponseReader, Usage, contents, cost_of, most_cost, server_tools, tool_results

__all__ = ["Gateway", "Grant", "Meter", "Held", "Refused", "upstream_of", "new_token", "SOCKET_NAME", "SECRET_KEYS"]

SOCKET_NAME = "gateway.sock"
MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
MAX_DISCARD = 1024 * 1024  # of a refused request's body, read and dropped
MAX_IN_FLIGHT = 16  # a run's model calls at once: what it can make the service buffer
FORWARDED = ("/v1/messages", "/v1/messages/count_tokens")
# The tenant's secrets: they stay here (what a run gets of its credentials file is service/runenv.py's allow-list).
SECRET_KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS",
               "ANTHROPIC_BASE_URL")
STALL_S = 120.0  # a run that reads nothing of its answer for this long is treated as gone
DRAIN_S = 600.0  # how long an answer is still read from the upstream after the run hung up (then: what was seen)
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
_HOP_BACK = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "trailer"}
_TOOL_MEMORY = 4096

# What a run's connections may hold on the service's side of the wall (issue 21): a run reaches the gateway from
# inside its sandbox, so each bound is per run (its socket) or per TCP peer, and what lies past it costs the service
# nothing — a run at its connection bound waits in the kernel's backlog, not in our fds. The CLI keeps a handful of
# connections (main thread, subagents, side requests) and sends each head and body in one burst.
MAX_RUN_CONNECTIONS = 64  # a run's socket, open at once: 4 × MAX_IN_FLIGHT, and 64 fds are no dent in the limit
MAX_PEER_CONNECTIONS = 64  # one TCP peer, before any token: on Kubernetes a peer is a run's pod
MAX_TCP_CONNECTIONS = 4096  # the TCP listener in all (and at most a quarter of the fd limit, see listen_tcp)
BACKLOG = 64  # connections the kernel queues for us while a listener is at its bound
HEAD_TIMEOUT_S = 10.0  # a request's head, from the connection's start: the CLI writes it at once
IDLE_TIMEOUT_S = 60.0  # a kept-alive connection with no next request (clients drop theirs sooner: undici 4 s)
BODY_STALL_S = 10.0  # the longest gap in a body
BODY_MIN_RATE = 64 * 1024  # bytes a second on average, after the first BODY_STALL_S: a trickle is cut
MAX_RUN_BODY_BYTES = 96 * 1024 * 1024  # the bodies of a run's open requests together: one MAX_BODY and half again
STREAK_QUIET_S = 60.0  # a bound hit again after this long is a new streak, logged again; within it, not

log = get_logger("flower.service.gateway")
audit_log = get_logger("flower.audit")


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
    """Money, on the service's side of the wall (``service.budgets``): every Messages call is admitted before it is
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


def _decode(body: bytes) -> dict[str, object]:
    try:
        value = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _headers(req: h11.Request, auth: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """What goes upstream: the run's headers in ``PASSED`` and its betas in ``BETAS`` (joined with the tenant's),
    then the tenant's own — never a run's header with a name the tenant sets. A run's value is its own bytes, read
    by the provider's logs and whatever displays them: one with a control character (an escape sequence, a NUL)
    or over ``MAX_PASSED_VALUE`` bytes is dropped, not passed on."""
    ours = {name for name, _ in auth}
    out: list[tuple[str, str]] = []
    betas: list[str] = []
    for k, v in req.headers:
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


def _body_size(req: h11.Request) -> int:
    """What the request's body will hold: its Content-Length (h11 reads no more), else (chunked) ``MAX_BODY``."""
    for name, value in req.headers:
        if name == b"content-length":
            return int(value)  # h11 checked it is digits
    return MAX_BODY


def _error(status: int, kind: str, message: str) -> tuple[int, bytes]:
    return status, json.dumps({"type": "error", "error": {"type": kind, "message": f"flower gateway: {message}"}}
                              ).encode()


Bound = Literal["run_connections", "peer_connections", "tcp_connections", "head_timeout", "body_timeout",
                "in_flight", "run_body_bytes", "budget_held"]


class _Cut(Exception):
    """A connection too slow for its bound: it closes, and ``bound`` is what the log says."""

    def __init__(self, bound: Bound | None) -> None:  # None: an idle kept-alive connection, closed without a word
        self.bound = bound


async def _read(reader: asyncio.StreamReader, until: float, bound: Bound | None) -> bytes:
    try:
        async with asyncio.timeout_at(until):
            return await reader.read(65536)
    except TimeoutError:
        raise _Cut(bound) from None


@dataclass(eq=False)
class _Listener:
    """A listening socket that accepts only while it holds fewer than ``limit`` connections: past that a client
    waits in the kernel's backlog (then in connect), which costs the service no fd, no memory and no CPU."""

    sock: socket.socket
    limit: int
    held: int = 0
    room: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def opened(self) -> None:
        self.held += 1

    def closed(self) -> None:
        self.held -= 1
        self.room.set()

    def close(self) -> None:
        """The accept loop ends; it closes the socket as it goes (after the loop stopped watching it)."""
        if self.task is not None:
            self.task.cancel()
        else:
            self.sock.close()


class _Streaks:
    """One log line per streak of one bound hit by one run or peer: a flood must not flood the log. A streak ends
    when its bound has not been hit for ``STREAK_QUIET_S``."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], float] = {}

    def hit(self, bound: Bound, *, limit: float, run: str | None = None, peer: str | None = None) -> None:
        if self.fresh(bound, run or peer or ""):
            log.warning("gateway.bound", bound=bound, limit=limit, run=run, peer=peer,
                        hint=f"further hits go unlogged until {STREAK_QUIET_S:.0f} s pass without one")

    def fresh(self, kind: str, who: str) -> bool:
        """This hit starts a streak (so it is logged)."""
        now = time.monotonic()
        key = (kind, who)
        last = self._last.get(key)
        self._last[key] = now
        if len(self._last) > 4096:  # peers come and go: forget the streaks that ended
            self._last = {k: t for k, t in self._last.items() if now - t <= STREAK_QUIET_S}
        return last is None or now - last > STREAK_QUIET_S


class Gateway:
    """Grants, listeners and the forwarding. ``meter`` admits every Messages call and settles its answer (without
    one, nothing is held: a gateway of tests and benchmarks)."""

    def __init__(self, *, prices: Mapping[str, tuple[float, float]] | None = None, meter: Meter | None = None,
                 connect_timeout: float = 10, read_timeout: float = 600) -> None:
        self.prices = dict(prices or {})
        self.meter = meter
        self.on_audit: AuditHook | None = None
        self.resolve: ResolveHook | None = None
        self._grants: dict[str, Grant] = {}
        self._by_hash: dict[str, Grant] = {}
        self._servers: dict[str, _Listener] = {}
        self._tcp: _Listener | None = None
        self._upstream = Upstream(connect_timeout=connect_timeout, read_timeout=read_timeout)
        self._conns: dict[asyncio.StreamWriter, str | None] = {}  # open connection → the run whose socket it came on
        self._tasks: set[asyncio.Task[None]] = set()  # the accepted connections' own tasks
        self._peers: Counter[str] = Counter()  # a TCP peer → its open connections
        self._bodies: Counter[str] = Counter()  # a run → the bytes of its open requests' bodies
        self._streaks = _Streaks()

    # -- grants ------------------------------------------------------------------------------
    async def open(self, grant: Grant, folder: Path | None = None) -> None:
        """Accept ``grant``'s token from now on; with ``folder``, also listen on ``folder/gateway.sock``,
        which answers for this run only."""
        self._grants[grant.run_id] = grant
        self._by_hash[grant.token_hash] = grant
        if folder is not None and grant.run_id not in self._servers:
            self._servers[grant.run_id] = await self._listen_unix(folder, grant.run_id)

    async def close(self, run_id: str) -> Grant | None:
        """The run ended: its token stops working at once, its socket goes."""
        grant = self._grants.pop(run_id, None)
        if grant is not None:
            self._by_hash.pop(grant.token_hash, None)
        server = self._servers.pop(run_id, None)
        if server is not None:
            server.close()
        for writer, owner in list(self._conns.items()):  # and the connections it holds open
            if owner == run_id:
                writer.close()
        return grant

    def grant(self, run_id: str) -> Grant | None:
        return self._grants.get(run_id)

    def grants(self, *, tenant: str | None = None) -> list[Grant]:
        return [g for g in self._grants.values() if tenant is None or g.tenant == tenant]

    async def _listen_unix(self, folder: Path, run_id: str) -> _Listener:
        folder.mkdir(mode=0o755, exist_ok=True)
        os.chmod(folder, 0o755)  # the run's uid must reach the socket; the token is what keeps others out
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            path = f"/proc/self/fd/{fd}/{SOCKET_NAME}"  # the folder's path may pass the 108 bytes a socket path has
            try:
                if stat.S_ISSOCK(os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False).st_mode):
                    os.unlink(SOCKET_NAME, dir_fd=fd)
            except FileNotFoundError:
                pass
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(path)
            os.chmod(path, 0o666)
        finally:
            os.close(fd)
        return self._serve(sock, MAX_RUN_CONNECTIONS, run_id)

    async def listen_tcp(self, host: str, port: int) -> int:
        """The cluster's way in (Kubernetes runs): the token alone names the run. Returns the port."""
        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        sock = socket.create_server((host, port), family=family)
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self._tcp = self._serve(sock, min(MAX_TCP_CONNECTIONS, max(nofile // 4, MAX_PEER_CONNECTIONS)), None)
        return int(sock.getsockname()[1])

    async def aclose(self) -> None:
        listeners = [*self._servers.values(), *([self._tcp] if self._tcp is not None else [])]
        self._servers.clear()
        for listener in listeners:
            listener.close()
        for writer in list(self._conns):
            writer.close()
        await asyncio.gather(*(x.task for x in listeners if x.task is not None), return_exceptions=True)
        await self._upstream.aclose()

    # -- accepting, within the bounds --------------------------------------------------------------
    def _serve(self, sock: socket.socket, limit: int, run_id: str | None) -> _Listener:
        sock.listen(BACKLOG)
        sock.setblocking(False)
        listener = _Listener(sock, limit)
        listener.task = asyncio.get_running_loop().create_task(self._accept(listener, run_id),
                                                               name=f"flower-gateway-accept-{run_id or 'tcp'}")
        return listener

    async def _accept(self, listener: _Listener, run_id: str | None) -> None:
        """Accept while there is room: on a run's socket up to ``MAX_RUN_CONNECTIONS``; on the TCP listener up to
        its limit in all, and past ``MAX_PEER_CONNECTIONS`` of one peer a connection is closed as it comes."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                while listener.held >= listener.limit:
                    bound: Bound = "run_connections" if run_id is not None else "tcp_connections"
                    self._streaks.hit(bound, limit=listener.limit, run=run_id)
                    listener.room.clear()
                    await listener.room.wait()
                try:
                    sock, address = await loop.sock_accept(listener.sock)
                except ConnectionError:  # the client gave up before we took it
                    continue
                except OSError as e:  # out of fds (or memory): wait a moment rather than spin
                    log.error("gateway.accept_failed", run=run_id, error=str(e)[:200])
                    await asyncio.sleep(1.0)
                    continue
                peer = str(address[0]) if run_id is None else ""
                if peer and self._peers[peer] >= MAX_PEER_CONNECTIONS:
                    sock.close()
                    self._streaks.hit("peer_connections", limit=MAX_PEER_CONNECTIONS, peer=peer)
                    continue
                listener.opened()
                if peer:
                    self._peers[peer] += 1
                task = loop.create_task(self._accepted(sock, listener, run_id, peer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            listener.sock.close()

    async def _accepted(self, sock: socket.socket, listener: _Listener, run_id: str | None, peer: str) -> None:
        try:
            try:
                reader, writer = await asyncio.open_connection(sock=sock)
            except OSError:
                sock.close()
                return
            await self._connection(reader, writer, run_id, peer)
        finally:
            listener.closed()
            if peer:
                self._peers[peer] -= 1
                if not self._peers[peer]:
                    del self._peers[peer]

    # -- one connection ----------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, run_id: str | None,
                          peer: str = "") -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._conns[writer] = run_id
        try:
            kept = False
            while (req := await self._head(conn, reader, kept)) is not None:
                if not await self._answer(conn, reader, writer, run_id, req):
                    break
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
                kept = True
        except _Cut as e:
            if e.bound is not None:
                limit = HEAD_TIMEOUT_S if e.bound == "head_timeout" else BODY_MIN_RATE
                self._streaks.hit(e.bound, limit=limit, run=run_id, peer=peer or None)
        except (h11.ProtocolError, ConnectionError, asyncio.IncompleteReadError, OSError, asyncio.CancelledError,
                UpstreamError, TimeoutError):
            pass  # either side went away mid-answer: the client sees its connection close
        finally:
            self._conns.pop(writer, None)
            writer.close()

    @staticmethod
    async def _event(conn: h11.Connection, reader: asyncio.StreamReader, until: float,
                     bound: Bound | None = "body_timeout") -> object:
        """The next event of the request; each read must come by ``until`` (loop time), else ``_Cut(bound)``."""
        while (ev := conn.next_event()) is h11.NEED_DATA:
            conn.receive_data(await _read(reader, until, bound))
        return ev

    async def _head(self, conn: h11.Connection, reader: asyncio.StreamReader, kept: bool) -> h11.Request | None:
        """The next request's head: on a new connection within ``HEAD_TIMEOUT_S``; on a ``kept`` one its first byte
        may take ``IDLE_TIMEOUT_S``, the rest of it ``HEAD_TIMEOUT_S`` more."""
        loop = asyncio.get_running_loop()
        ev: object = conn.next_event()
        if ev is h11.NEED_DATA:
            if kept:
                conn.receive_data(await _read(reader, loop.time() + IDLE_TIMEOUT_S, None))
            ev = await self._event(conn, reader, loop.time() + HEAD_TIMEOUT_S, "head_timeout")
        return ev if isinstance(ev, h11.Request) else None

    @staticmethod
    def _body_until(started: float, seen: int) -> float:
        """When the next piece of a body must have come: within ``BODY_STALL_S`` of now, and at
        ``BODY_MIN_RATE`` on average after the first ``BODY_STALL_S``."""
        loop = asyncio.get_running_loop()
        return min(loop.time() + BODY_STALL_S, started + BODY_STALL_S + seen / BODY_MIN_RATE)

    async def _body(self, conn: h11.Connection, reader: asyncio.StreamReader) -> bytes | None:
        """The request's body, or None past ``MAX_BODY`` (read only once the token was accepted)."""
        body = bytearray()
        started = asyncio.get_running_loop().time()
        while isinstance(ev := await self._event(conn, reader, self._body_until(started, len(body))), h11.Data):
            body += ev.data
            if len(body) > MAX_BODY:
                return None
        return bytes(body) if isinstance(ev, h11.EndOfMessage) else None

    async def _refuse(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      status: int, body: bytes) -> bool:
        """Answer without reading the body into memory: up to ``MAX_DISCARD`` of it is read and dropped (so a TCP
        close does not reset the answer away), then the connection closes. Returns False (close)."""
        seen = 0
        started = asyncio.get_running_loop().time()
        while seen <= MAX_DISCARD and isinstance(ev := await self._event(conn, reader, self._body_until(started, seen)),
                                                 h11.Data):
            seen += len(ev.data)
        await self._send(conn, writer, status, body, close=True)
        return False

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int, body: bytes, *,
                    close: bool = False) -> None:
        """``close``: the connection ends after this answer, and says so (a client must not send another on it)."""
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        writer.write(conn.send(h11.Response(status_code=status, headers=[*headers, *([("connection", "close")]
                                                                                      if close else [])])))
        writer.write(conn.send(h11.Data(data=body)))
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()

    async def _authorised(self, req: h11.Request, run_id: str | None) -> Grant | None:
        token = ""
        for name, value in req.headers:
            if name == b"x-api-key":
                token = value.decode("latin-1")
            elif name == b"authorization" and value[:7].lower() == b"bearer ":
                token = token or value[7:].decode("latin-1")
        if not token:
            return None
        digest = hashlib.sha256(token.encode("latin-1")).hexdigest()
        grant = self._by_hash.get(digest)
        if grant is None and run_id is None and self.resolve is not None:  # TCP: a run started a moment ago
            grant = await self.resolve(digest)
        if grant is None or (run_id is not None and not hmac.compare_digest(grant.run_id, run_id)):
            return None
        return grant

    def _denied(self, grant: Grant, status: int, why: str, bound: Bound | None = None) -> None:
        """A call the gateway turns away, logged before the answer goes — once per streak of one kind of denial by
        one run (``_Streaks``): a run that loops on a refusal must not flood the log."""
        if bound is not None:
            limits = {"in_flight": MAX_IN_FLIGHT, "run_body_bytes": MAX_RUN_BODY_BYTES}
            self._streaks.hit(bound, limit=limits.get(bound, 0), run=grant.run_id)
        elif self._streaks.fresh(f"denied-{status}", grant.run_id):
            audit_log.warning("audit.gateway_denied", tenant=grant.tenant, run=grant.run_id, status=status,
                              reason=why[:300], source="wire",
                              hint=f"further denials of this kind go unlogged until {STREAK_QUIET_S:.0f} s pass "
                                   "without one")

    async def _answer(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      run_id: str | None, req: h11.Request) -> bool:
        """One request; False when the connection must close (its body was never read, or was too big)."""
        target = req.target.decode("latin-1")
        path = target.split("?", 1)[0]
        grant = await self._authorised(req, run_id)  # before a byte of the body is read: nobody makes us buffer
        if grant is None:
            log.warning("gateway.refused", run=run_id, path=path[:200], reason="no live token of this run")
            return await self._refuse(conn, reader, writer, *_error(
                401, "authentication_error", "this token belongs to no live run on this socket"))
        if req.method != b"POST" or path not in FORWARDED:
            return await self._refuse(conn, reader, writer, *_error(
                404, "not_found_error", f"only POST {' and '.join(FORWARDED)} are forwarded"))
        if grant.refused:
            self._denied(grant, 403, grant.refused)
            return await self._refuse(conn, reader, writer, *_error(403, "permission_error", grant.refused))
        if grant.in_flight >= MAX_IN_FLIGHT:
            self._denied(grant, 429, "in flight", "in_flight")
            return await self._refuse(conn, reader, writer, *_error(
                429, "rate_limit_error", f"more than {MAX_IN_FLIGHT} model calls of this run at once"))
        size = _body_size(req)
        if size > MAX_BODY:
            self._denied(grant, 413, "request body over 64 MB")
            return await self._refuse(conn, reader, writer, *_error(
                413, "request_too_large", "request body over 64 MB"))
        if self._bodies[grant.run_id] + size > MAX_RUN_BODY_BYTES:
            self._denied(grant, 429, "bodies at once", "run_body_bytes")
            return await self._refuse(conn, reader, writer, *_error(
                429, "rate_limit_error", f"this run's model calls at once carry over {MAX_RUN_BODY_BYTES >> 20} MB"))
        grant.in_flight += 1
        self._bodies[grant.run_id] += size  # held until the answer is done
        try:
            body = await self._body(conn, reader)
            if body is None:
                self._denied(grant, 413, "request body over 64 MB")
                await self._send(conn, writer, *_error(413, "request_too_large", "request body over 64 MB"),
                                 close=True)
                return False
            await self._forward(conn, writer, grant, req, target, body)
        finally:
            grant.in_flight -= 1
            self._bodies[grant.run_id] -= size
            if self._bodies[grant.run_id] <= 0:
                del self._bodies[grant.run_id]
        return True

    async def _forward(self, conn: h11.Connection, writer: asyncio.StreamWriter, grant: Grant, req: h11.Request,
                       target: str, body: bytes) -> None:
        messages = target.split("?", 1)[0] == "/v1/messages"
        if grant.on_first is not None:
            first, grant.on_first = grant.on_first, None
            first()
        try:
            ask = msgspec.json.decode(body, type=Ask)
        except (msgspec.DecodeError, RecursionError) as e:
            return await self._send(conn, writer, *_error(400, "invalid_request_error", (
                f"the body is not a Messages API request ({str(e)[:200]}); send a JSON object with the model, "
                "max_tokens and messages")))
        found = contents(ask)  # one walk of the conversation's blocks, for the egress check and the most it costs
        if refused := self._egress_refused(grant, ask, found.fetched):
            return await self._send(conn, writer, *_error(403, "permission_error", refused))
        held: Held | None = None
        meter = self.meter if messages else None  # what else the API has (count_tokens) costs nothing
        if grant.refused:
            self._denied(grant, 403, grant.refused)
            return await self._send(conn, writer, *_error(403, "permission_error", grant.refused))
        if meter is not None:
            admitted = await meter.admit(grant, most_cost(ask, len(body), self.prices, found.unbounded))
            if isinstance(admitted, Refused) and admitted.final:
                self._denied(grant, 403, admitted.why)
                return await self._send(conn, writer, *_error(403, "permission_error", admitted.why))
            if isinstance(admitted, Refused):
                self._denied(grant, 429, admitted.why, "budget_held")
                return await self._send(conn, writer, *_error(429, "rate_limit_error", admitted.why))
            held = admitted
        agent = next((v.decode("latin-1")[:200] for k, v in req.headers if k == b"x-claude-code-agent-id"), "main")
        who = {"tenant": grant.tenant, "run": grant.run_id, "agent": agent, "source": "wire"}
        if messages:  # the denials and spills the CLI sends back, written before the call goes: a crash loses none
            # a long conversation is megabytes of JSON: parsed off the loop
            request = await asyncio.to_thread(_decode, body) if len(body) > 256 * 1024 else _decode(body)
            self._results(grant, request, who)
        started = time.monotonic()
        try:
            resp = await self._upstream.post(grant.upstream + target, _headers(req, grant.auth), body)
        except UpstreamError as e:
            if meter is not None and held is not None:
                await meter.settle(grant, held, None)
            log.warning("gateway.upstream_failed", tenant=grant.tenant, run=grant.run_id, error=str(e)[:300])
            return await self._send(conn, writer, *_error(502, "api_error", f"the upstream did not answer ({e})"))
        reader = ResponseReader(stream=resp.header("content-type").startswith("text/event-stream"))
        try:
            await self._relay(conn, writer, grant, resp, reader)
        finally:
            resp.close()
            reader.close()
            if messages:
                self._calls(grant, reader, who)  # at once: the CLI's next request answers these
                usage = self._meter(grant, reader, ask, resp.status_code, time.monotonic() - started)
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

    def _egress_refused(self, grant: Grant, ask: Ask, fetched: dict[str, list[str]]) -> str | None:
        """Why the request is not forwarded for this run — the provider would reach the network (or the tenant's
        uploaded files) for it: server-side tools, or content whose source is a URL or a file, that the run may
        not use — or None. Written in the wire audit (once per streak of one kind by one run)."""
        tools = [name for name in server_tools(ask) if name not in grant.server_tools]
        sources = {kind: blocks for kind, blocks in fetched.items() if kind not in grant.server_tools}
        if not tools and not sources:
            return None
        kinds = (["server_tools"] if tools else []) + sorted(sources)  # a fixed few: the names are the run's to vary
        if self._streaks.fresh("egress-" + ",".join(kinds), grant.run_id):
            audit_log.warning("audit.egress_refused", tenant=grant.tenant, run=grant.run_id, status=403,
                              tools=tools[:20], sources={k: v[:10] for k, v in sources.items()}, source="wire",
                              hint=f"further refusals of this kind go unlogged until {STREAK_QUIET_S:.0f} s pass "
                                   "without one")
        if tools:
            return (f"server-side tool(s) {', '.join(tools[:20])} are not forwarded for this run: the provider would "
                    "run them on the network for it, so its tenant needs `egress = \"open\"` and to list them in "
                    "`server_tools` in the tenants file")
        what = " and ".join(f"{'URL' if kind == 'url_sources' else 'file'} sources ({', '.join(blocks[:10])})"
                            for kind, blocks in sources.items())
        return (f"content with {what} is not forwarded for this run: the provider would fetch it for the run (a URL "
                "reaches any host; a file is what was uploaded with its tenant's key), so send the content itself "
                "(base64 or text) instead, or its tenant needs `egress = \"open\"` and to list "
                f"{' and '.join(f'`{k}`' for k in sources)} in `server_tools` in the tenants file")

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

"""The connection layer: the unix sockets (one per run) and the TCP listener, each accepting within its bounds, and
the per-connection loop that frames requests with h11 — heads within their time, bodies at their rate. Each request's
head is put to ``admission`` before a byte of its body is read; what it lets through goes to ``forward``.

A request is answered only when its token belongs to a live run — and, on a run's socket, to *that* run. What a
run's connections may hold on the service's side of the wall (issue 21) is bounded per run (its socket) or per TCP
peer, and what lies past it costs the service nothing — a run at its connection bound waits in the kernel's
backlog, not in our fds. The CLI keeps a handful of connections (main thread, subagents, side requests) and sends
each head and body in one burst.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import resource
import socket
import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import h11

from ..logging import get_logger
from .admission import MAX_BODY, Audit, Bound, Head, Refuse, on_head, too_large
from .forward import Forwarder, refusal, send
from .grant import SOCKET_NAME, AuditHook, Grant, Meter, ResolveHook
from .streaks import Streaks
from .upstream import Upstream, UpstreamError

if TYPE_CHECKING:
    from ..tracing.wire import WireSpans

__all__ = ["Gateway", "MAX_RUN_CONNECTIONS", "MAX_PEER_CONNECTIONS", "MAX_TCP_CONNECTIONS"]

MAX_HEAD = 64 * 1024
MAX_DISCARD = 1024 * 1024  # of a refused request's body, read and dropped
MAX_RUN_CONNECTIONS = 64  # a run's socket, open at once: 4 × MAX_IN_FLIGHT, and 64 fds are no dent in the limit
MAX_PEER_CONNECTIONS = 64  # one TCP peer, before any token: on Kubernetes a peer is a run's pod
MAX_TCP_CONNECTIONS = 4096  # the TCP listener in all (and at most a quarter of the fd limit, see listen_tcp)
BACKLOG = 64  # connections the kernel queues for us while a listener is at its bound
HEAD_TIMEOUT_S = 10.0  # a request's head, from the connection's start: the CLI writes it at once
IDLE_TIMEOUT_S = 60.0  # a kept-alive connection with no next request (clients drop theirs sooner: undici 4 s)
BODY_STALL_S = 10.0  # the longest gap in a body
BODY_MIN_RATE = 64 * 1024  # bytes a second on average, after the first BODY_STALL_S: a trickle is cut

log = get_logger("flower.service.gateway")


def _body_size(req: h11.Request) -> int:
    """What the request's body will hold: its Content-Length (h11 reads no more), else (chunked) ``MAX_BODY``."""
    for name, value in req.headers:
        if name == b"content-length":
            return int(value)  # h11 checked it is digits
    return MAX_BODY


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


class Gateway:
    """Grants, listeners and connections; each request let through goes to the ``Forwarder``. ``meter`` admits
    every Messages call and settles its answer (without one, nothing is held: a gateway of tests and benchmarks)."""

    def __init__(self, *, prices: Mapping[str, tuple[float, float]] | None = None, meter: Meter | None = None,
                 connect_timeout: float = 10, read_timeout: float = 600) -> None:
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
        self._streaks = Streaks()
        self._forwarder = Forwarder(self._upstream, self._streaks, prices=prices or {}, meter=meter)

    @property
    def prices(self) -> dict[str, tuple[float, float]]:
        return self._forwarder.prices

    @property
    def meter(self) -> Meter | None:
        return self._forwarder.meter

    @meter.setter
    def meter(self, meter: Meter | None) -> None:
        self._forwarder.meter = meter

    @property
    def on_audit(self) -> AuditHook | None:
        """After the wire audit counted something of a run's."""
        return self._forwarder.on_audit

    @on_audit.setter
    def on_audit(self, hook: AuditHook | None) -> None:
        self._forwarder.on_audit = hook

    @property
    def spans(self) -> WireSpans | None:
        """Where the wire's spans go (``service.tracing``; None: traces are off)."""
        return self._forwarder.spans

    @spans.setter
    def spans(self, spans: WireSpans | None) -> None:
        self._forwarder.spans = spans

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
            if self._forwarder.spans is not None:
                self._forwarder.spans.closed(grant)
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
        await send(conn, writer, status, body, close=True)
        return False

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

    async def _answer(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      run_id: str | None, req: h11.Request) -> bool:
        """One request; False when the connection must close (its body was never read, or was too big)."""
        target = req.target.decode("latin-1")
        path = target.split("?", 1)[0]
        grant = await self._authorised(req, run_id)  # before a byte of the body is read: nobody makes us buffer
        size = _body_size(req)
        decided = on_head(Head(grant, req.method.decode("latin-1"), path, size,
                               self._bodies[grant.run_id] if grant is not None else 0))
        if isinstance(decided, Refuse):
            return await self._refused(conn, reader, writer, grant, run_id, path, decided)
        assert grant is not None, "admission lets no request through without a live grant"
        grant.in_flight += 1
        self._bodies[grant.run_id] += size  # held until the answer is done
        try:
            body = await self._body(conn, reader)
            if body is None:
                self._streaks.refused(grant, too_large())
                await send(conn, writer, *refusal(too_large()), close=True)
                return False
            await self._forwarder.forward(conn, writer, grant, req, target, body)
        finally:
            grant.in_flight -= 1
            self._bodies[grant.run_id] -= size
            if self._bodies[grant.run_id] <= 0:
                del self._bodies[grant.run_id]
        return True

    async def _refused(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       grant: Grant | None, run_id: str | None, path: str, decided: Refuse) -> bool:
        """A head ``admission`` refused, logged as it says and answered (the connection closes)."""
        if decided.audit is Audit.UNAUTHORISED or grant is None:
            log.warning("gateway.refused", run=run_id, path=path[:200], reason="no live token of this run")
        else:
            self._streaks.refused(grant, decided)
        return await self._refuse(conn, reader, writer, *refusal(decided))

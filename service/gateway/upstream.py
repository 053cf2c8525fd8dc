"""HTTP/1.1 to a tenant's upstream, as lean as the gateway's own side: h11 over asyncio streams, TLS for
``https``, idle connections kept per origin. The gateway sits on every model call, so what it adds per request
is what a run waits for; a general client (httpx → httpcore → anyio) costs a millisecond here."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import h11
from ..errors import UpstreamError

__all__ = ["Upstream", "UpstreamResponse", "UpstreamError"]

_IDLE_PER_ORIGIN = 32


@dataclass(eq=False)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    h11: h11.Connection = field(default_factory=lambda: h11.Connection(h11.CLIENT))


class UpstreamResponse:
    """Status and headers at once; the body as it arrives (``chunks``). ``close`` gives the connection back when
    the answer was read to its end, else drops it."""

    def __init__(self, upstream: "Upstream", origin: tuple[str, str, int], conn: _Conn, head: h11.Response,
                 read_timeout: float) -> None:
        self._upstream, self._origin, self._conn, self._timeout = upstream, origin, conn, read_timeout
        self.status_code = head.status_code
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers]
        self._done = False

    def header(self, name: str) -> str:
        return next((v for k, v in self.headers if k.lower() == name), "")

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            ev = conn.h11.next_event()
            if ev is h11.NEED_DATA:
                # b"" at the end: an answer framed by the connection's close (no length) ends there
                conn.h11.receive_data(await asyncio.wait_for(conn.reader.read(65536), self._timeout))
            elif isinstance(ev, h11.ConnectionClosed):
                raise UpstreamError("the upstream closed the connection mid-answer")
            elif isinstance(ev, h11.Data):
                yield bytes(ev.data)
            elif isinstance(ev, h11.EndOfMessage):
                self._done = True
                return

    def close(self) -> None:
        conn = self._conn
        if self._done and conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE:
            conn.h11.start_next_cycle()
            self._upstream._release(self._origin, conn)
        else:
            conn.writer.close()


class Upstream:
    def __init__(self, *, connect_timeout: float = 10, read_timeout: float = 600) -> None:
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._tls = ssl.create_default_context()

    async def post(self, url: str, headers: list[tuple[str, str]], body: bytes) -> UpstreamResponse:
        """Send the request; return once the answer's head is in. A kept connection the upstream has meanwhile
        closed is retried once on a new one (nothing of the answer had arrived)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamError(f"the upstream URL {url!r} is not http(s)")
        origin = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rsplit("@", 1)[-1]
        request = h11.Request(method="POST", target=target,
                              headers=[("host", host), *headers, ("content-length", str(len(body)))])
        for attempt in (0, 1):
            conn, reused = await self._take(origin)
            try:
                conn.writer.write(conn.h11.send(request) + conn.h11.send(h11.Data(data=body))
                                  + conn.h11.send(h11.EndOfMessage()))
                await conn.writer.drain()
                head = await self._head(conn)
            except (OSError, h11.ProtocolError, asyncio.IncompleteReadError, UpstreamError, TimeoutError) as e:
                conn.writer.close()
                if reused and attempt == 0:
                    continue
                raise UpstreamError(f"{type(e).__name__}: {e}") from None
            return UpstreamResponse(self, origin, conn, head, self.read_timeout)
        raise UpstreamError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _head(self, conn: _Conn) -> h11.Response:
        while True:
            ev = conn.h11.next_event()
            if ev is h11.NEED_DATA:
                data = await asyncio.wait_for(conn.reader.read(65536), self.read_timeout)
                if not data:
                    raise UpstreamError("the upstream closed the connection before answering")
                conn.h11.receive_data(data)
            elif isinstance(ev, h11.Response):
                return ev
            elif not isinstance(ev, h11.InformationalResponse):
                raise UpstreamError(f"unexpected {type(ev).__name__} before the answer's head")

    async def _take(self, origin: tuple[str, str, int]) -> tuple[_Conn, bool]:
        idle = self._idle.get(origin) or []
        while idle:
            conn = idle.pop()
            if not conn.writer.is_closing() and not conn.reader.at_eof():
                return conn, True
            conn.writer.close()
        scheme, host, port = origin
        opening = (asyncio.open_connection(host, port, ssl=self._tls, server_hostname=host) if scheme == "https"
                   else asyncio.open_connection(host, port))
        try:
            reader, writer = await asyncio.wait_for(opening, self.connect_timeout)
        except (OSError, TimeoutError) as e:
            raise UpstreamError(f"cannot connect to {host}:{port} ({type(e).__name__})") from None
        return _Conn(reader, writer), False

    def _release(self, origin: tuple[str, str, int], conn: _Conn) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) < _IDLE_PER_ORIGIN:
            idle.append(conn)
        else:
            conn.writer.close()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.writer.close()
        self._idle.clear()

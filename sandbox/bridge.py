"""Inside a sandbox with no network: a loopback port that leads to the service's model gateway.

The run's only way out is a unix socket in a folder the service mounts read-only (``FLOWER_GATEWAY_SOCKET``).
The CLI speaks HTTP to a URL, so the runner listens on ``127.0.0.1:<free port>`` and pipes each connection
to that socket, byte for byte (the gateway checks the run's token; this bridge trusts nothing and adds
nothing). One thread of its own with a selector: a busy runner never delays a chunk, and a run that has used up
its pids (a fork flood) cannot take the bridge down with it — no thread is started per connection.

A gateway that is not there — restarting, or its replica gone until another takes the run over — is waited
for (``WAIT_S``): a connection the CLI opens meanwhile is held and led on once the socket answers again, so the
data plane's short absence costs the run a moment, not its model call.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from pathlib import Path

__all__ = ["open_bridge", "Bridge", "WAIT_S"]

WAIT_S = 60.0  # how long a connection waits for the gateway to answer again (a lease moves within 30 s)
_RETRY_S = 0.1


class Bridge:
    """A running bridge; ``url`` is what ANTHROPIC_BASE_URL should say."""

    def __init__(self, socket_path: Path) -> None:
        # a folder fd keeps the path short: a unix socket path has at most 108 bytes
        self.path = socket_path
        self._dir_fd = os.open(socket_path.parent, os.O_RDONLY | os.O_DIRECTORY)
        self._target = f"/proc/self/fd/{self._dir_fd}/{socket_path.name}"
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._server, selectors.EVENT_READ, None)
        self._closed = False
        self._waiting: list[tuple[socket.socket, float]] = []  # connections held until the gateway answers
        threading.Thread(target=self._run, name="flower-gateway-bridge", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        while not self._closed:
            try:
                ready = self._sel.select(_RETRY_S if self._waiting else 1.0)
            except OSError:
                return
            for key, _ in ready:
                if key.data is None:
                    self._accept()
                else:
                    self._pump(key.fileobj, key.data)  # type: ignore[arg-type]
            waiting, self._waiting = self._waiting, []
            for client, deadline in waiting:
                self._lead(client, deadline)

    def _accept(self) -> None:
        try:
            client, _ = self._server.accept()
        except OSError:
            return
        self._lead(client, time.monotonic() + WAIT_S)

    def _lead(self, client: socket.socket, deadline: float) -> None:
        """Pipe ``client`` to the gateway; while it does not answer, hold the connection (until ``deadline``: then
        the CLI sees it close, and retries)."""
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self._target)
        except OSError:
            upstream.close()
            if time.monotonic() < deadline and not self._closed:
                self._waiting.append((client, deadline))
            else:
                client.close()
            return
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(client, upstream)
        self._sel.register(client, selectors.EVENT_READ, (upstream, pair))
        self._sel.register(upstream, selectors.EVENT_READ, (client, pair))

    def _pump(self, src: socket.socket, data: tuple[socket.socket, "_Pair"]) -> None:
        dst, pair = data
        try:
            chunk = src.recv(65536)
            if chunk:
                dst.sendall(chunk)
                return
            dst.shutdown(socket.SHUT_WR)  # a half-close travels on
        except OSError:  # one side went away: both directions end
            pair.ended = 1
        try:
            self._sel.unregister(src)
        except (KeyError, ValueError):  # closed with its pair earlier in this same round
            return
        pair.ended += 1
        if pair.ended >= 2:
            for s in (pair.a, pair.b):
                try:
                    self._sel.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()

    def close(self) -> None:
        self._closed = True
        self._server.close()
        os.close(self._dir_fd)


class _Pair:
    """Two sockets piped both ways; closed once both directions have ended."""

    def __init__(self, a: socket.socket, b: socket.socket) -> None:
        self.a, self.b = a, b
        self.ended = 0


def open_bridge(socket_path: str | Path) -> Bridge:
    """Listen on a free loopback port and lead every connection to ``socket_path``."""
    path = Path(socket_path)
    if not path.parent.is_dir():
        raise OSError(f"the gateway's folder {path.parent} is not there: the service mounts it into every run")
    return Bridge(path)

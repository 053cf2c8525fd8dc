"""Inside a sandbox with no network: a loopback port that leads to the service's model gateway.

The run's only way out is a unix socket in a folder the service mounts read-only (``FLOWER_GATEWAY_SOCKET``).
The CLI speaks HTTP to a URL, so the runner listens on ``127.0.0.1:<free port>`` and pipes each connection
to that socket, byte for byte (the gateway checks the run's token; this bridge trusts nothing and adds
nothing). Plain threads with blocking sockets: a CLI holds a handful of connections, and a thread wakes
for each chunk at once, whatever the runner's event loop is busy with.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

__all__ = ["open_bridge", "Bridge"]


class Bridge:
    """A running bridge; ``url`` is what ANTHROPIC_BASE_URL should say."""

    def __init__(self, socket_path: Path) -> None:
        # a folder fd keeps the path short: a unix socket path has at most 108 bytes
        self._dir_fd = os.open(socket_path.parent, os.O_RDONLY | os.O_DIRECTORY)
        self._target = f"/proc/self/fd/{self._dir_fd}/{socket_path.name}"
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, name="flower-gateway-bridge", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self._target)
            except OSError:
                client.close()
                upstream.close()
                continue
            _Pair(client, upstream)

    def close(self) -> None:
        self._closed = True
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()
        os.close(self._dir_fd)


class _Pair:
    """Two sockets piped both ways, a thread per direction; closed when both directions are done."""

    def __init__(self, a: socket.socket, b: socket.socket) -> None:
        self.a, self.b = a, b
        self._left = 2
        self._lock = threading.Lock()
        threading.Thread(target=self._copy, args=(a, b), daemon=True).start()
        threading.Thread(target=self._copy, args=(b, a), daemon=True).start()

    def _copy(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)  # a half-close travels on
        except OSError:  # one side went away: the other direction ends too
            for s in (self.a, self.b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        finally:
            with self._lock:
                self._left -= 1
                if self._left == 0:
                    self.a.close()
                    self.b.close()


def open_bridge(socket_path: str | Path) -> Bridge:
    """Listen on a free loopback port and lead every connection to ``socket_path``."""
    path = Path(socket_path)
    if not path.parent.is_dir():
        raise OSError(f"the gateway's folder {path.parent} is not there: the service mounts it into every run")
    return Bridge(path)

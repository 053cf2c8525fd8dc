"""Inside a sandbox with no network: a loopback port that leads to the service's model gateway.

The run's only way out is a unix socket in a folder the service mounts read-only (``FLOWER_GATEWAY_SOCKET``).
The CLI speaks HTTP to a URL, so the runner listens on ``127.0.0.1:<free port>`` and pipes each connection
to that socket, byte for byte (the gateway checks the run's token; this bridge trusts nothing and adds
nothing). It runs on a thread of its own so a busy runner never delays the model's stream.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

__all__ = ["open_bridge", "Bridge"]


class Bridge:
    """A running bridge; ``url`` is what ANTHROPIC_BASE_URL should say."""

    def __init__(self, socket_path: Path) -> None:
        # a folder fd keeps the path short: a unix socket path has at most 108 bytes
        self._dir_fd = os.open(socket_path.parent, os.O_RDONLY | os.O_DIRECTORY)
        self._target = f"/proc/self/fd/{self._dir_fd}/{socket_path.name}"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, name="flower-gateway-bridge", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if not self.port:
            raise OSError("the gateway bridge could not listen on 127.0.0.1")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            server = self._loop.run_until_complete(asyncio.start_server(self._pipe, "127.0.0.1", 0))
            self.port = int(server.sockets[0].getsockname()[1])
        finally:
            self._ready.set()
        self._loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self._target)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
        finally:
            writer.close()
            up_writer.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except (ConnectionError, OSError):
        dst.close()  # the other side went away: the copy the other way ends too


def open_bridge(socket_path: str | Path) -> Bridge:
    """Listen on a free loopback port and lead every connection to ``socket_path``."""
    path = Path(socket_path)
    if not path.parent.is_dir():
        raise OSError(f"the gateway's folder {path.parent} is not there: the service mounts it into every run")
    return Bridge(path)

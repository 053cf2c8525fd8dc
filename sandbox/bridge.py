"""Inside a sandbox with no network: a loopback port that leads to the service's model gateway.

The run's only way out is a unix socket in a folder the service mounts read-only (``FLOWER_GATEWAY_SOCKET``).
The CLI speaks HTTP to a URL, so the runner listens on ``127.0.0.1:<free port>`` and pipes each connection
to that socket, byte for byte (the gateway checks the run's token; this bridge trusts nothing and adds
nothing). One thread of its own with a selector: a busy runner never delays a chunk, and a run that has used up
its pids (a fork flood) cannot take the bridge down with it — no thread is started per connection.

A gateway that is not there — restarting, or its replica gone until another takes the run over — is waited
for (``WAIT_S``): a connection the CLI opens meanwhile is held and led on once the socket answers again, so the
data plane's short absence costs the run a moment, not its model call.

A warm sandbox's bridge (``rehearsal=True``) is opened before its run exists: until ``claim`` it leads nothing
anywhere and answers each request itself with an empty reply (``REHEARSAL_REPLY``), so the CLI spawned ahead can
run its first prompt the whole way (``flower.core.spare``) with no token and no model. That CLI was spawned with
``stand_in`` as its key; once claimed, the bridge swaps it for the run's token in what the CLI sends — the one
thing it adds, and only to a key it made itself.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import socket
import threading
import time
from pathlib import Path

__all__ = ["open_bridge", "Bridge", "WAIT_S", "REHEARSAL_REPLY"]

WAIT_S = 60.0  # how long a connection waits for the gateway to answer again (a lease moves within 30 s)
_RETRY_S = 0.1
REHEARSAL_REPLY = ""  # what a rehearsal's model says: nothing (the rehearsal is rewound from the conversation)
_MAX_REHEARSAL = 1 << 23  # a request to rehearse is the CLI's first: tens of kB


def _rehearsal_answer(body: bytes | bytearray) -> bytes:
    """An empty Messages reply, streamed when asked to be: what a model that says nothing would send."""
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        request = {}
    model = str(request.get("model") or "rehearsal") if isinstance(request, dict) else "rehearsal"
    usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"id": "msg_rehearsal", "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "text", "text": REHEARSAL_REPLY}], "stop_reason": "end_turn",
               "stop_sequence": None, "usage": usage}
    if isinstance(request, dict) and request.get("stream"):
        events = [("message_start", {"type": "message_start", "message": {**message, "content": [],
                                                                           "stop_reason": None}}),
                  ("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}),
                  ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": REHEARSAL_REPLY}}),
                  ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                  ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                                        "stop_sequence": None},
                                     "usage": {"output_tokens": 0}}),
                  ("message_stop", {"type": "message_stop"})]
        payload = b"".join(f"event: {e}\ndata: {json.dumps(d)}\n\n".encode() for e, d in events)
        kind = b"text/event-stream"
    else:
        payload, kind = json.dumps(message).encode(), b"application/json"
    return (b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: " + str(len(payload)).encode()
            + b"\r\nConnection: close\r\n\r\n" + payload)


def _whole_request(data: bytearray) -> bytearray | None:
    """The body of the HTTP request ``data`` begins with, once all of it has come; None until then."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            length = int(value.strip())
        elif name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            return body if body.endswith(b"0\r\n\r\n") else None  # only its end is looked for: it is answered alike
    return body[:length] if len(body) >= length else None


class Bridge:
    """A running bridge; ``url`` is what ANTHROPIC_BASE_URL should say."""

    def __init__(self, socket_path: Path, *, rehearsal: bool = False) -> None:
        # a folder fd keeps the path short: a unix socket path has at most 108 bytes
        self.path = socket_path
        self.rehearsing = rehearsal
        self.stand_in = "flower-stand-in-" + secrets.token_hex(16)  # the key a CLI spawned ahead is given: no token
        self._swap: tuple[bytes, bytes] | None = None
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

    def claim(self, token: str | None) -> None:
        """The run exists: from now on lead every connection to the gateway, ``stand_in`` swapped for ``token``."""
        self._swap = (self.stand_in.encode(), token.encode()) if token else None
        self.rehearsing = False  # after the swap is set: a connection that sees this sees the swap too

    def _run(self) -> None:
        while not self._closed:
            try:
                ready = self._sel.select(_RETRY_S if self._waiting else 1.0)
            except OSError:
                return
            for key, _ in ready:
                if key.data is None:
                    self._accept()
                elif isinstance(key.data, _Rehearsal):
                    self._rehearse(key.data)
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
        if self.rehearsing:
            self._sel.register(client, selectors.EVENT_READ, _Rehearsal(client))
            return
        self._lead(client, time.monotonic() + WAIT_S)

    def _rehearse(self, r: "_Rehearsal") -> None:
        """Read a request to its end and answer it; then the connection closes (the next one is led, once claimed)."""
        try:
            chunk = r.client.recv(65536)
        except OSError:
            chunk = b""
        r.data += chunk
        body = _whole_request(r.data) if chunk else None
        if chunk and body is None and len(r.data) < _MAX_REHEARSAL:
            return
        self._sel.unregister(r.client)
        if body is not None:
            try:
                r.client.sendall(_rehearsal_answer(body))
            except OSError:
                pass
        r.client.close()

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
        pair = _Pair(client, upstream, self._swap)
        self._sel.register(client, selectors.EVENT_READ, (upstream, pair))
        self._sel.register(upstream, selectors.EVENT_READ, (client, pair))

    def _pump(self, src: socket.socket, data: tuple[socket.socket, "_Pair"]) -> None:
        dst, pair = data
        try:
            chunk = src.recv(65536)
            if chunk:
                dst.sendall(pair.outbound(chunk) if src is pair.a else chunk)
                return
            if src is pair.a and pair.held:
                dst.sendall(pair.held)
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
    """Two sockets piped both ways (``a`` the CLI's); closed once both directions have ended."""

    def __init__(self, a: socket.socket, b: socket.socket, swap: tuple[bytes, bytes] | None) -> None:
        self.a, self.b = a, b
        self.ended = 0
        self.swap = swap
        self.held = b""  # the CLI's last bytes that may be the start of the stand-in key, until the next come

    def outbound(self, chunk: bytes) -> bytes:
        """What the CLI sent, the stand-in key swapped for the run's token — across chunk borders too: bytes that
        may begin the stand-in wait for the next chunk (a request never ends on them: its last byte closes a JSON
        body or a header block), or the end of the connection."""
        if self.swap is None:
            return chunk
        old, new = self.swap
        data = (self.held + chunk).replace(old, new)
        keep = next((n for n in range(min(len(old) - 1, len(data)), 0, -1) if old.startswith(data[-n:])), 0)
        self.held = data[len(data) - keep:] if keep else b""
        return data[:len(data) - keep]


class _Rehearsal:
    """A connection a warm sandbox's bridge answers itself: what has come of its request."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.data = bytearray()


def open_bridge(socket_path: str | Path, *, rehearsal: bool = False) -> Bridge:
    """Listen on a free loopback port and lead every connection to ``socket_path`` (with ``rehearsal``: answer
    them itself until ``Bridge.claim``)."""
    path = Path(socket_path)
    if not path.parent.is_dir():
        raise OSError(f"the gateway's folder {path.parent} is not there: the service mounts it into every run")
    return Bridge(path, rehearsal=rehearsal)

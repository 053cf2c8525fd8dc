"""What the egress suites share: package registries played by small HTTP servers on 127.0.0.1, each remembering
what reached it, and the hosts file that names them for squid (never the machine's /etc/hosts)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NAMES = ("registry.flower.test", "readonly.flower.test", "other.flower.test")


class Registry(http.server.ThreadingHTTPServer):
    seen: list[tuple[str, str, str | None, int]]

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Seen(http.server.BaseHTTPRequestHandler):
    """Answers every request with 200 and remembers it (method, path, Host, the bytes of its body that came)."""

    protocol_version = "HTTP/1.1"
    server: Registry

    def _answer(self) -> None:
        size = len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))  # what came of the body
        self.server.seen.append((self.command, self.path, self.headers.get("Host"), size))
        body = b"registry says hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_HEAD = do_PUT = _answer

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def registries(n: int = 2) -> Iterator[list[Registry]]:
    servers = []
    for _ in range(n):
        s = Registry(("127.0.0.1", 0), _Seen)
        s.seen = []
        threading.Thread(target=s.serve_forever, daemon=True).start()
        servers.append(s)
    try:
        yield servers
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def hosts_file(folder: Path) -> Path:
    path = folder / "hosts"
    path.write_text(f"127.0.0.1 {' '.join(NAMES)}\n")
    return path

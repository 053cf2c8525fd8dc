"""A recorded Kubernetes API contract: a real HTTP server on 127.0.0.1 that replays fixture answers and records requests.

The fixtures in ``fixtures/`` are written from the Kubernetes API reference's shapes (Job, JobList, PodList, Pod,
Secret, Status); ``${name}``-style placeholders are filled per answer. A test lists the exchanges it expects with
``reply(method, path, status, fixture)``; each answers once, in order. A request nothing expects gets a 500 Status
and is kept in ``unexpected`` (the test fixture fails on it, and on expected exchanges that never came).
"""

from __future__ import annotations

import json
import string
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any

    def q(self, key: str) -> str | None:
        values = self.query.get(key)
        return values[0] if values else None


@dataclass
class Reply:
    method: str
    path: str
    status: int
    fixture: str
    subs: dict[str, str] = field(default_factory=dict)
    used: bool = False


def fixture_text(file: str, /, **subs: str) -> str:
    return string.Template((FIXTURES / file).read_text(encoding="utf-8")).substitute(subs)


def fixture(file: str, /, **subs: str) -> Any:
    return json.loads(fixture_text(file, **subs))


class RecordedAPI:
    def __init__(self, **defaults: str) -> None:
        self.defaults = defaults
        self.replies: list[Reply] = []
        self.requests: list[Request] = []
        self.unexpected: list[Request] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                req = Request(self.command, url.path, urllib.parse.parse_qs(url.query, keep_blank_values=True),
                              {k.lower(): v for k, v in self.headers.items()}, body)
                status, payload, ctype = api._answer(req)
                data = payload.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    def reply(self, method: str, path: str, status: int, fixture: str, /, **subs: str) -> None:
        self.replies.append(Reply(method, path, status, fixture, {**self.defaults, **subs}))

    def _answer(self, req: Request) -> tuple[int, str, str]:
        with self._lock:
            self.requests.append(req)
            for r in self.replies:
                if not r.used and r.method == req.method and r.path == req.path:
                    r.used = True
                    ctype = "text/plain" if r.fixture.endswith(".txt") else "application/json"
                    return r.status, fixture_text(r.fixture, **r.subs), ctype
            self.unexpected.append(req)
        return 500, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                                "message": f"no recorded answer for {req.method} {req.path}"}), "application/json"

    def pending(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.replies if not r.used]

    def __enter__(self) -> "RecordedAPI":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def permission_of(req: Request, namespace: str) -> tuple[str, str, str]:
    """(apiGroup, resource, verb) RBAC would check for ``req``; AssertionError for a path outside ``namespace``."""
    parts = req.path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise AssertionError(f"not a Kubernetes API path: {req.path}")
    assert rest[:2] == ["namespaces", namespace], f"{req.path} is not in namespace {namespace}"
    resource, name, sub = rest[2], rest[3] if len(rest) > 3 else None, rest[4] if len(rest) > 4 else None
    if sub:
        resource = f"{resource}/{sub}"
    verb = {("GET", True): "get", ("GET", False): "list", ("POST", False): "create", ("DELETE", True): "delete",
            ("DELETE", False): "deletecollection", ("PATCH", True): "patch", ("PUT", True): "update"}[
        (req.method, name is not None)]
    return group, resource, verb

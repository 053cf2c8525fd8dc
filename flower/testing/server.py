"""The scripted model's HTTP side: the Anthropic Messages API on 127.0.0.1.

A threaded stdlib server, so it serves sync and async tests alike and never
shares an event loop with the code under test.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable

from .script import Fault, Reply, Request, Rule

MODEL = "claude-scripted-1"


def _is_side(req: Request) -> bool:
    """The CLI's own side requests (session titles and the like), not the conversation."""
    if req.tools:
        return False
    probe = (req.system + "\n" + req.prompt).lower()
    return any(w in probe for w in ("title", "summar", "topic", "quota"))


def _side_answer(req: Request) -> Reply:
    if "json" in (req.system + req.prompt).lower():
        return Reply(text='{"title": "Scripted session"}')
    return Reply(text="Scripted session")


def _usage(req: Request, reply: Reply) -> dict[str, int]:
    """Zero tokens — so zero cost, never an invented dollar figure — unless the script sets ``usage=``."""
    usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    usage.update(reply.usage or {})
    return usage


def _message(req: Request, reply: Reply, msg_id: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    content += [{"type": "tool_use", "id": t.id, "name": t.name, "input": t.input} for t in reply.tools]
    return {"id": msg_id, "type": "message", "role": "assistant", "model": req.body.get("model") or MODEL,
            "content": content, "stop_reason": reply.stop, "stop_sequence": None, "usage": _usage(req, reply)}


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _stream(req: Request, reply: Reply, msg_id: str) -> Iterable[bytes]:
    full = _message(req, reply, msg_id)
    usage = full["usage"]
    start = {**full, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _sse("message_start", {"type": "message_start", "message": start})
    for i, block in enumerate(full["content"]):
        if block["type"] == "text":
            yield _sse("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": {"type": "text", "text": ""}})
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": {"type": "text_delta", "text": block["text"]}})
        else:
            yield _sse("content_block_start", {"type": "content_block_start", "index": i,
                                               "content_block": {**block, "input": {}}})
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": {"type": "input_json_delta",
                                                         "partial_json": json.dumps(block["input"])}})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": i})
    yield _sse("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": full["stop_reason"], "stop_sequence": None},
                                 "usage": {"output_tokens": usage["output_tokens"],
                                           "input_tokens": usage["input_tokens"]}})
    yield _sse("message_stop", {"type": "message_stop"})


class ScriptedModel:
    """A fake Anthropic API that drives the real Claude Code CLI by rules.

    Use as a context manager (sync or async). `env` is what a CLI needs to talk to
    it: base URL, a dummy key, and an isolated config dir so no host state leaks in.
    Every request is kept in `requests`; requests no rule answered in `unmatched`.
    """

    def __init__(self, rules: Iterable[Rule] = (), *, config_dir: str | Path | None = None,
                 max_retries: int | None = 1, fallback: str = "[scripted model: no rule matched]") -> None:
        self.rules: list[Rule] = list(rules)
        self.requests: list[Request] = []
        self.fallback = fallback
        self.max_retries = max_retries
        self._lock = threading.Lock()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._config_dir = Path(config_dir) if config_dir else None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> "ScriptedModel":
        if self._config_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="flower-cli-")
            self._config_dir = Path(self._tmp.name)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self), bind_and_activate=False)
        self._server.request_queue_size = 256  # many CLIs at once (load tests) must not find the backlog full
        self._server.server_bind()
        self._server.server_activate()
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._tmp:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "ScriptedModel":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> "ScriptedModel":
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests use ----------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server, "ScriptedModel is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def config_dir(self) -> Path:
        assert self._config_dir, "ScriptedModel is not started"
        return self._config_dir

    @property
    def env(self) -> dict[str, str]:
        env = {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": "sk-scripted-not-a-real-key",
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
        }
        if self.max_retries is not None:
            env["CLAUDE_CODE_MAX_RETRIES"] = str(self.max_retries)
        return env

    @contextmanager
    def environ(self) -> Iterator[None]:
        """``env`` in the process environment for the block (Runtime looks for credentials there), then back."""
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def apply(self, options: Any) -> Any:
        """Point SDK options at this model (env merged, host config isolated)."""
        options.env = {**options.env, **self.env}
        return options

    async def collect(self, prompt: str, options: Any) -> list[Any]:
        """Run one real-CLI query against this model and return every SDK message."""
        from claude_agent_sdk import query

        return [m async for m in query(prompt=prompt, options=self.apply(options))]

    def add(self, *rules: Rule) -> None:
        with self._lock:
            self.rules.extend(rules)

    @property
    def conversation(self) -> list[Request]:
        """Requests of the conversations themselves (side requests left out)."""
        return [r for r in self.requests if r.path.startswith("/v1/messages") and not r.side
                and not r.path.endswith("count_tokens")]

    @property
    def unmatched(self) -> list[Request]:
        return [r for r in self.conversation if r.rule is None and r.status == 200]

    def sessions(self) -> list[str]:
        return list(dict.fromkeys(r.session for r in self.conversation if r.session and not r.is_subagent))

    # -- answering ---------------------------------------------------------
    def _answer(self, req: Request) -> Reply | Fault:
        with self._lock:
            self.requests.append(req)
            if _is_side(req):
                req.side = True
                return _side_answer(req)
            for rule in self.rules:
                if rule.matches(req):
                    req.rule = rule.name
                    return rule.take(req)
        return Reply(text=self.fallback)


def _handler(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def handle(self) -> None:
            try:
                super().handle()
            except (ConnectionResetError, BrokenPipeError):
                pass  # the CLI hung up (an interrupt, a kill): nothing to answer

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                  ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("request-id", f"req_scripted_{len(model.requests)}")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _not_scripted(self, path: str) -> None:
            self._send(404, Fault(404, "not_found_error", f"{path} is not scripted").body())

        def _stream_head(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

        def do_GET(self) -> None:
            self._not_scripted(self.path)

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return self._send(400, Fault(400, "invalid_request_error", "body is not JSON").body())
            path = self.path.split("?")[0]
            req = Request(n=len(model.requests), path=path, body=body, size=len(raw),
                          headers={k.lower(): v for k, v in self.headers.items()},
                          header_list=[(k.lower(), v) for k, v in self.headers.items()])
            if not path.endswith("/v1/messages"):  # recorded, never answered by a rule
                with model._lock:
                    model.requests.append(req)
                if path.endswith("/count_tokens"):
                    return self._send(200, json.dumps({"input_tokens": max(1, len(raw) // 4)}).encode())
                return self._not_scripted(path)
            answer = model._answer(req)
            if answer.delay:
                time.sleep(answer.delay)
            msg_id = f"msg_scripted_{req.n:06d}"
            if isinstance(answer, Fault):
                req.status = 200 if answer.drop else answer.status
                if answer.drop:
                    return self._drop(req, msg_id)
                return self._send(answer.status, answer.body(), answer.headers)
            req.usage = _usage(req, answer)
            if not body.get("stream"):
                return self._send(200, json.dumps(_message(req, answer, msg_id)).encode())
            self._stream_head()
            for chunk in _stream(req, answer, msg_id):
                self.wfile.write(chunk)
            self.wfile.flush()

        def _drop(self, req: Request, msg_id: str) -> None:
            self.close_connection = True
            if req.body.get("stream"):  # the stream starts, then the socket closes
                self._stream_head()
                self.wfile.write(next(iter(_stream(req, Reply(text="partial"), msg_id))))
                self.wfile.flush()
            self.connection.shutdown(2)

    return Handler

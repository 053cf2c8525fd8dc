"""``Remote``: the service's REST API over httpx; the event stream over httpx-sse, resumed after a drop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx
import msgspec
from httpx_sse import ServerSentEvent, aconnect_sse

from ..core.errors import FlowerError
from .types import DiffFiles, Question, RunInfo, StreamEnd, StreamEvent
from .url import BadSetting, check_server

DIFF_ERROR = b"flower-diff-error: "
"""How a diff the service could not finish after it began ends: its last line starts with this."""
RECONNECTS = 20
"""Drops in a row an event stream survives (each is resumed with Last-Event-ID) before the client gives up."""


class RemoteError(FlowerError):
    """The service said no (``status`` is its HTTP status), or could not be reached (``status`` 0). ``message``
    is in English, or the service's own sentence; when the client wrote it, ``key`` and ``fields`` let a front end
    say it in the person's language (empty ``key``: the service's words)."""

    def __init__(self, status: int, message: str, *, key: str = "", **fields: str) -> None:
        super().__init__(message)
        self.status, self.message, self.key, self.fields = status, message, key, fields


class Remote:
    """One service, one tenant token. Use as ``async with Remote(url, token) as api: ...``."""

    def __init__(self, server: str, token: str, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not server:
            raise RemoteError(0, "no service URL: pass --server, set FLOWER_SERVER, or run `flower remote login`",
                              key="no_server")
        if not token:
            raise RemoteError(0, "no tenant token: pass --token, set FLOWER_TOKEN, or run `flower remote login`",
                              key="no_token")
        try:
            self.server = check_server(server)
        except BadSetting as e:
            raise RemoteError(0, e.message, key=e.key, **e.fields) from None
        self._http = httpx.AsyncClient(base_url=self.server, timeout=timeout, transport=transport,
                                       headers={"Authorization": f"Bearer {token}"})

    async def __aenter__(self) -> Remote:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    # -- requests --------------------------------------------------------------------------
    async def _call(self, method: str, path: str, *, body: dict[str, Any] | None = None,
                    params: dict[str, Any] | None = None, timeout: float | None = None) -> httpx.Response:
        try:
            r = await self._http.request(method, "/v1" + path, json=body, params=params,
                                         timeout=timeout if timeout is not None else self._http.timeout)
        except httpx.HTTPError as e:
            raise RemoteError(0, f"cannot reach the service at {self.server}: {e or type(e).__name__}",
                              key="unreachable", server=self.server, error=str(e or type(e).__name__)) from None
        if r.status_code >= 400:
            raise _refusal(r)
        return r

    async def submit(self, ask: str, options: dict[str, Any] | None = None) -> RunInfo:
        r = await self._call("POST", "/runs", body={"ask": ask, "options": options or {}})
        return msgspec.convert(r.json(), RunInfo)

    async def runs(self, *, status: str | None = None, limit: int = 100) -> list[RunInfo]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        r = await self._call("GET", "/runs", params=params)
        return msgspec.convert(r.json().get("runs", []), list[RunInfo])

    async def run(self, run_id: str) -> RunInfo:
        return msgspec.convert((await self._call("GET", f"/runs/{run_id}")).json(), RunInfo)

    async def questions(self, run_id: str) -> list[Question]:
        r = await self._call("GET", f"/runs/{run_id}/questions")
        return msgspec.convert(r.json().get("questions", []), list[Question])

    async def answer(self, run_id: str, question_id: str, text: str) -> None:
        await self._call("POST", f"/runs/{run_id}/answers", body={"question_id": question_id, "text": text})

    async def message(self, run_id: str, text: str) -> None:
        await self._call("POST", f"/runs/{run_id}/messages", body={"text": text})

    async def interrupt(self, run_id: str, text: str) -> None:
        await self._call("POST", f"/runs/{run_id}/interrupt", body={"text": text})

    async def cancel(self, run_id: str, *, wait: float = 30.0) -> RunInfo:
        r = await self._call("POST", f"/runs/{run_id}/cancel", params={"wait": wait},
                             timeout=wait + self._http.timeout.read if self._http.timeout.read else None)
        return msgspec.convert(r.json(), RunInfo)

    async def delete(self, run_id: str, *, branch: bool = False) -> RunInfo:
        """An ended run's files (and its branch with ``branch``); its tombstone comes back."""
        r = await self._call("DELETE", f"/runs/{run_id}", params={"branch": "true" if branch else "false"})
        return msgspec.convert(r.json(), RunInfo)

    async def diff(self, run_id: str, *, path: str | None = None) -> str:
        """The whole diff (or one file's) as one string; ``diff_lines`` for one that may be large."""
        return "".join([line async for line in self.diff_lines(run_id, path=path)])

    async def diff_lines(self, run_id: str, *, path: str | None = None) -> AsyncIterator[str]:
        """The run's diff (or the one file's), line by line (each with its ``\\n``) as the service streams it.
        A diff over the service's ``max_diff_mb`` is a RemoteError (422) saying how to fetch the branch
        instead; one git could not finish is a RemoteError too, after the lines that came."""
        params = {"path": path} if path is not None else None
        try:
            async with self._http.stream("GET", f"/v1/runs/{run_id}/diff", params=params) as r:
                if r.status_code >= 400:
                    await r.aread()
                    raise _refusal(r)
                pending = b""
                async for chunk in r.aiter_bytes():
                    *lines, pending = (pending + chunk).split(b"\n")
                    for raw in lines:
                        if raw.startswith(DIFF_ERROR):
                            why = raw[len(DIFF_ERROR):].decode("utf-8", "replace")
                            raise RemoteError(0, f"the diff of run {run_id} was cut short: {why}", key="diff_cut",
                                              run=run_id, error=why)
                        yield raw.decode("utf-8", "replace") + "\n"
                if pending:
                    yield pending.decode("utf-8", "replace")
        except httpx.HTTPError as e:
            raise RemoteError(0, f"cannot read the diff of run {run_id} from {self.server}: {e or type(e).__name__}",
                              key="diff_unreadable", run=run_id, server=self.server,
                              error=str(e or type(e).__name__)) from None

    async def diff_files(self, run_id: str) -> DiffFiles:
        return msgspec.convert((await self._call("GET", f"/runs/{run_id}/diff/files")).json(), DiffFiles)

    async def manifest(self, run_id: str) -> dict[str, Any]:
        data = (await self._call("GET", f"/runs/{run_id}/manifest")).json()
        return data if isinstance(data, dict) else {}

    # -- the event stream ------------------------------------------------------------------
    async def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[StreamEvent | StreamEnd]:
        """Every event of the run after ``after``, live, then the ``StreamEnd``; a dropped stream is resumed
        where it stopped (Last-Event-ID), so nothing is seen twice or missed."""
        last, drops = after, 0
        while True:
            headers = {"Last-Event-ID": str(last)} if last else {}
            try:
                async with aconnect_sse(self._http, "GET", f"/v1/runs/{run_id}/events", headers=headers,
                                        timeout=httpx.Timeout(self._http.timeout.connect, read=None)) as source:
                    r = source.response
                    if r.status_code == 429:
                        await r.aread()
                        await asyncio.sleep(_retry_after(r))
                        continue
                    if r.status_code >= 400:
                        await r.aread()
                        raise _refusal(r)
                    async for sse in source.aiter_sse():
                        item = _decode(sse)
                        if item is None:
                            continue
                        if isinstance(item, StreamEnd):
                            yield item
                            return
                        if item.seq <= last:
                            continue
                        last, drops = item.seq, 0
                        yield item
            except httpx.HTTPError as e:
                drops += 1
                if drops > RECONNECTS:
                    raise RemoteError(0, f"the event stream of run {run_id} keeps dropping: {e}", key="stream_drops",
                                      run=run_id, error=str(e)) from None
                await asyncio.sleep(min(5.0, 0.2 * drops))
                continue
            drops += 1  # the stream closed without its `end`: resume it
            if drops > RECONNECTS:
                raise RemoteError(0, f"the event stream of run {run_id} keeps closing before the run ends",
                                  key="stream_closes", run=run_id)
            await asyncio.sleep(min(5.0, 0.2 * drops))


def _decode(sse: ServerSentEvent) -> StreamEvent | StreamEnd | None:
    if not sse.data:
        return None
    try:
        if sse.event == "end":
            return msgspec.json.decode(sse.data, type=StreamEnd)
        return msgspec.json.decode(sse.data, type=StreamEvent)
    except msgspec.DecodeError:
        return None  # a line this client does not understand is skipped, not fatal


def _refusal(r: httpx.Response) -> RemoteError:
    """The service's one-sentence ``error`` (its words); else the status and the start of the body."""
    try:
        body = r.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return RemoteError(r.status_code, str(body["error"]))
    if r.status_code == 401:
        return RemoteError(401, "the service refused the token: check it, or ask the operator for yours",
                           key="refused_token")
    return RemoteError(r.status_code, f"the service answered {r.status_code} {r.reason_phrase}: {r.text[:200]}",
                       key="answered", code=str(r.status_code), reason=r.reason_phrase, body=r.text[:200])


def _retry_after(r: httpx.Response) -> float:
    try:
        return max(0.5, min(30.0, float(r.headers.get("retry-after", "5"))))
    except ValueError:
        return 5.0

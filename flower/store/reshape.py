"""Reshaping on load, composed: any SessionStore, wrapped with a list of passes.

A *pass* is a function of one transcript: it edits a copy of the entries (or returns a
new list) and says what it did, as a small report of counts. It never sees a store,
so it is tested on plain lists, in milliseconds. Three ship with flower —
``Expire`` (stale ephemeral Bash results), ``Trim`` (old bulk spilled to disk) and
``Prune`` (denials, API errors, interrupt residue, orphan calls) — in that order.

``Expire`` and ``Trim`` live in ``trim.py``, ``Prune`` in ``prune.py``.

``ReshapingSessionStore(inner, passes)`` is a SessionStore that forwards everything
to ``inner`` and runs the passes on what ``load()`` returns; the rows in ``inner``
never change. ``last_report`` (all passes' counts, merged) and ``reports`` (by pass)
describe the latest ``load()``; each load replaces them whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

import anyio.to_thread
import msgspec
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from flower.store.sqlite import SqliteSessionStore, _gc_paused
from flower.store.transcript import Entry, TranscriptIndex

__all__ = ["Pass", "Report", "ReshapingSessionStore", "run_passes"]

Report = dict[str, int]


class Pass(Protocol):
    """One reshaping pass: edits ``entries`` (a private copy) and reports what it did.

    Returns the entries to go on with: ``entries`` itself, or a new list when entries
    were inserted or removed. ``ix`` indexes ``entries`` as given.
    """

    @property
    def name(self) -> str:
        """The key of this pass's report in ``reports``."""
        ...

    def __call__(self, entries: list[Entry], ix: TranscriptIndex) -> tuple[list[Entry], Report]: ...


def run_passes(entries: list[Entry], passes: Sequence[Pass]) -> tuple[list[Entry], dict[str, Report]]:
    """Every pass in order over one transcript; the index is rebuilt only when a pass made a new list."""
    reports: dict[str, Report] = {}
    with _gc_paused():
        ix: TranscriptIndex | None = None
        for p in passes:
            if ix is None:  # built when a pass needs it: never after the last one
                ix = TranscriptIndex(entries)
            out, reports[p.name] = p(entries, ix)
            if out is not entries:
                entries, ix = out, None
    return entries, reports


class ReshapingSessionStore(SessionStore):
    """``inner`` with ``passes`` run on every ``load()``; every other call goes straight through.

    ``copy``: copy what ``inner.load`` returns (a JSON round trip) before reshaping it. Needed for a store that
    hands out the objects it keeps (the SDK's ``InMemorySessionStore``); a ``SqliteSessionStore``
    decodes fresh objects on every load, so the default skips the copy for it.
    """

    def __init__(self, inner: SessionStore, passes: Sequence[Pass], *, copy: bool | None = None) -> None:
        self.inner = inner
        self.passes = list(passes)
        self.copy = not isinstance(inner, SqliteSessionStore) if copy is None else copy
        self.reports: dict[str, Report] = {}
        self.last_report: Report = {}

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        await self.inner.append(key, entries)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        entries = await self.inner.load(key)
        self.reports, self.last_report = {}, {}
        if not entries or not self.passes:
            return entries
        rows = cast(list[Entry], entries)
        out, reports = await anyio.to_thread.run_sync(self._reshape, rows)
        self.reports = reports
        self.last_report = {k: v for r in reports.values() for k, v in r.items()}
        return out  # type: ignore[return-value]  # entries are plain JSON dicts, as the SDK's TypedDict says

    def _reshape(self, rows: list[Entry]) -> tuple[list[Entry], dict[str, Report]]:
        if self.copy:  # entries are JSON: a round trip through msgspec copies them several times faster
            with _gc_paused():
                rows = msgspec.json.decode(msgspec.json.encode(rows))
        return run_passes(rows, self.passes)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        return await self.inner.list_sessions(project_key)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        return await self.inner.list_session_summaries(project_key)

    async def delete(self, key: SessionKey) -> None:
        await self.inner.delete(key)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        return await self.inner.list_subkeys(key)

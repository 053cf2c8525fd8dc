"""The SDK's own SessionStore contracts, with no optional method skipped, for all three stores."""

from __future__ import annotations

import itertools
from pathlib import Path

from claude_agent_sdk.testing import run_session_store_conformance

from flower.store import PruningSessionStore, SqliteSessionStore, TrimmingSessionStore


def _factory(tmp_path: Path, make):  # type: ignore[no-untyped-def]
    n = itertools.count()
    return lambda: make(tmp_path / f"s{next(n)}.db")


async def test_sqlite_conformance(tmp_path: Path) -> None:
    await run_session_store_conformance(_factory(tmp_path, SqliteSessionStore), skip_optional=frozenset())


async def test_trimming_conformance(tmp_path: Path) -> None:
    await run_session_store_conformance(
        _factory(tmp_path, lambda p: TrimmingSessionStore(p, workspace=tmp_path)), skip_optional=frozenset()
    )


async def test_pruning_conformance(tmp_path: Path) -> None:
    await run_session_store_conformance(
        _factory(tmp_path, lambda p: PruningSessionStore(p, workspace=tmp_path)), skip_optional=frozenset()
    )


# -- the composed store: passes on any SessionStore -----------------------------------------------

from claude_agent_sdk import InMemorySessionStore  # noqa: E402

from flower.store import (  # noqa: E402
    EphemeralPolicy,
    Expire,
    Prune,
    PrunePolicy,
    ReshapingSessionStore,
    Trim,
    TrimPolicy,
)


def _passes(tmp_path: Path) -> list:  # type: ignore[type-arg]
    return [Expire(EphemeralPolicy()), Trim(TrimPolicy(), tmp_path / "spill"), Prune(PrunePolicy())]


async def test_reshaping_over_sqlite_conformance(tmp_path: Path) -> None:
    await run_session_store_conformance(
        _factory(tmp_path, lambda p: ReshapingSessionStore(SqliteSessionStore(p), _passes(tmp_path))),
        skip_optional=frozenset())


async def test_reshaping_over_the_sdk_in_memory_store_conformance(tmp_path: Path) -> None:
    await run_session_store_conformance(
        lambda: ReshapingSessionStore(InMemorySessionStore(), _passes(tmp_path)), skip_optional=frozenset())

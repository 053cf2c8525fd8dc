"""Every table spec runs twice: on a SQLite file in tmp_path and on a fresh PostgreSQL database
(``tests/_postgres.py``) — a table proves itself on both in the same few lines (langgraph's checkpoint
conformance in spirit)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.registry import Registry


@pytest.fixture(params=["sqlite", "postgres"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    if request.param == "sqlite":
        reg = Registry(tmp_path / "data" / "registry.sqlite3")
    else:
        reg = Registry.postgres(request.getfixturevalue("postgres_url"))
    yield reg
    reg.close()

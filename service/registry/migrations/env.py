"""Alembic's entry: always given an open connection by ``service.migrate`` (never a URL from an ini file), so the
migration runs inside the caller's transaction, under its lock."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.registry.tables import metadata


def _run() -> None:
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError("the registry's migrations run through `python -m service migrate`, not the alembic CLI")
    context.configure(connection=connection, target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()


_run()

"""v0001, schema 3: runs, spend, deliveries as a service of today writes them.

On a SQLite file an older service wrote (schema 1 to 3, no Alembic table yet) it creates what is missing and adds
the columns added since version 1, rows kept. On PostgreSQL it creates the tables from ``service.tables``.
A later revision changes the schema with ``op`` calls of its own and leaves this file as it is.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Connection

from service.registry.dialects import sqlite_column, sqlite_ddl, sqlite_indexes
from service.registry.tables import metadata, runs

revision = "v0001"
down_revision: str | None = None
branch_labels = None
depends_on = None

SCHEMA = 3  # SQLite's PRAGMA user_version after this revision


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        _sqlite(bind)
    else:
        metadata.create_all(bind)


def _sqlite(bind: Connection) -> None:
    for statement in sqlite_ddl(metadata):
        bind.exec_driver_sql(statement)
    have = {str(r[1]) for r in bind.exec_driver_sql("PRAGMA table_info(runs)")}
    for column in runs.columns:
        if column.name not in have:
            bind.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {sqlite_column(column)}")
    for statement in sqlite_indexes(metadata):
        bind.exec_driver_sql(statement)
    bind.exec_driver_sql(f"PRAGMA user_version={SCHEMA}")


def downgrade() -> None:
    raise NotImplementedError("the baseline is not undone: restore a backup (SQLite) or a pg_dump instead")

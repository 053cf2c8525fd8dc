"""v0005, schema 7: the ``replicas`` table — each live replica's name with its heartbeat, so that a second process
started under a name a live one holds refuses to start (two processes under one name would share its leases)."""

from __future__ import annotations

from alembic import op
from sqlalchemy import MetaData

from service.registry.dialects import sqlite_ddl
from service.registry.tables import replicas

revision = "v0005"
down_revision: str | None = "v0004"
branch_labels = None
depends_on = None

SCHEMA = 7  # SQLite's PRAGMA user_version after this revision


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        only = MetaData()
        replicas.to_metadata(only)
        for statement in sqlite_ddl(only):
            bind.exec_driver_sql(statement)
        bind.exec_driver_sql(f"PRAGMA user_version={SCHEMA}")
    else:
        replicas.create(bind, checkfirst=True)


def downgrade() -> None:
    op.drop_table(replicas.name)

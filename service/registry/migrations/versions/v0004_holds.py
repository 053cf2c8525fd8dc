"""v0004, schema 6: the ``holds`` table — what the model calls in flight may still cost, in the database, so that
two gateways (or replicas) admit calls against one tenant's budget and pass it by one call at most — and the
``streams`` table, each tenant's SSE streams counted across replicas."""

from __future__ import annotations

from alembic import op
from sqlalchemy import MetaData

from service.registry.dialects import sqlite_ddl, sqlite_indexes
from service.registry.tables import holds, streams

revision = "v0004"
down_revision: str | None = "v0003"
branch_labels = None
depends_on = None

SCHEMA = 6  # SQLite's PRAGMA user_version after this revision


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        only = MetaData()
        holds.to_metadata(only)
        streams.to_metadata(only)
        for statement in [*sqlite_ddl(only), *sqlite_indexes(only)]:
            bind.exec_driver_sql(statement)
        bind.exec_driver_sql(f"PRAGMA user_version={SCHEMA}")
    else:
        holds.create(bind, checkfirst=True)
        streams.create(bind, checkfirst=True)


def downgrade() -> None:
    op.drop_table(streams.name)
    op.drop_table(holds.name)

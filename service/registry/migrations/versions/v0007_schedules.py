"""v0007, schema 9: the ``schedules`` table (a tenant's scheduled asks, each due tick held like a lease) and the
``fires`` table (what each tick or trigger started, or why nothing)."""

from __future__ import annotations

from alembic import op
from sqlalchemy import MetaData

from service.registry.dialects import sqlite_ddl, sqlite_indexes
from service.registry.tables import fires, schedules

revision = "v0007"
down_revision: str | None = "v0006"
branch_labels = None
depends_on = None

SCHEMA = 9  # SQLite's PRAGMA user_version after this revision


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        only = MetaData()
        schedules.to_metadata(only)
        fires.to_metadata(only)
        for statement in [*sqlite_ddl(only), *sqlite_indexes(only)]:
            bind.exec_driver_sql(statement)
        bind.exec_driver_sql(f"PRAGMA user_version={SCHEMA}")
    else:
        schedules.create(bind, checkfirst=True)
        fires.create(bind, checkfirst=True)


def downgrade() -> None:
    op.drop_table(fires.name)
    op.drop_table(schedules.name)

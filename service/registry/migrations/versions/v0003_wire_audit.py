"""v0003, schema 5: the ``wire_audit`` table — the model gateway runs in a process of its own
(``service.gateway.daemon``), so its audit counts of a run reach the scheduler through the registry."""

from __future__ import annotations

from alembic import op

from service.registry.dialects import sqlite_ddl
from service.registry.tables import metadata, wire_audit

revision = "v0003"
down_revision: str | None = "v0002"
branch_labels = None
depends_on = None

SCHEMA = 5  # SQLite's PRAGMA user_version after this revision


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for statement in sqlite_ddl(metadata):
            if statement.startswith(f"CREATE TABLE IF NOT EXISTS {wire_audit.name} "):
                bind.exec_driver_sql(statement)
        bind.exec_driver_sql(f"PRAGMA user_version={SCHEMA}")
    else:
        wire_audit.create(bind, checkfirst=True)


def downgrade() -> None:
    op.drop_table(wire_audit.name)

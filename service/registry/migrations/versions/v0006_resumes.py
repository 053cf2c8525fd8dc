"""v0006, schema 8: what a run that outlives its sandbox keeps in its row — the losses it was resumed after
(``losses``), how many sandboxes it has had (``sandboxes``: a start with one before is a resume, its folder kept),
when it was parked and when a parked run wakes by itself (``parked_at``, ``wake_at``: its question's timeout), and
the earliest a lost run may start again (``not_before``: the resume's backoff). Rows are kept; new columns are empty."""

from __future__ import annotations

from alembic import op
from sqlalchemy import inspect

from service.registry.dialects import sqlite_column
from service.registry.tables import runs

revision = "v0006"
down_revision: str | None = "v0005"
branch_labels = None
depends_on = None

SCHEMA = 8  # SQLite's PRAGMA user_version after this revision
NEW = ("losses", "sandboxes", "parked_at", "wake_at", "not_before")


def upgrade() -> None:
    bind = op.get_bind()
    have = {c["name"] for c in inspect(bind).get_columns("runs")}
    for name in NEW:
        if name in have:  # v0001 on an old SQLite file adds every column the table has today
            continue
        column = runs.c[name]
        if bind.dialect.name == "sqlite":
            bind.exec_driver_sql(f"ALTER TABLE runs ADD COLUMN {sqlite_column(column)}")
        else:
            op.add_column("runs", column.copy())
    if bind.dialect.name == "sqlite":
        bind.exec_driver_sql(f"PRAGMA user_version={SCHEMA}")


def downgrade() -> None:
    for name in reversed(NEW):
        op.drop_column("runs", name)

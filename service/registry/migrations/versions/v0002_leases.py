"""v0002, schema 4: the ``leases`` table — which replica follows each live run, and its fencing token.

v0001 creates every table of ``service.tables`` on a database it makes, this one included; a database at v0001
before this table existed gets it here.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import MetaData

from service.registry.dialects import sqlite_ddl
from service.registry.tables import leases

revision = "v0002"
down_revision: str | None = "v0001"
branch_labels = None
depends_on = None

SCHEMA = 4  # SQLite's PRAGMA user_version after this revision


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        only = MetaData()
        leases.to_metadata(only)
        for statement in sqlite_ddl(only):
            bind.exec_driver_sql(statement)
        bind.exec_driver_sql(f"PRAGMA user_version={SCHEMA}")
    else:
        leases.create(bind, checkfirst=True)

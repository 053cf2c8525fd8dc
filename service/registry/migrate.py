"""Bringing a registry's schema to this service's: Alembic's revisions (``registry/migrations``), run at every open
and by ``python -m service migrate``.

On PostgreSQL several replicas may start at once: the migration runs inside one transaction that first takes a
transaction-scoped advisory lock, so exactly one of them migrates and the others, once it commits, find nothing
to do. The wait is bounded (``lock_timeout``): a holder that is stuck gives ``RegistryLocked`` with a sentence,
not a hang. A database a newer service migrated (a revision this code does not have, or a SQLite
``user_version`` above ours) is ``RegistryNewer``, and is left as it is.
"""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from ..errors import RegistryLocked, RegistryNewer

__all__ = ["migrate", "head", "current", "LOCK_KEY"]

MIGRATIONS = Path(__file__).parent / "migrations"
LOCK_KEY = 0x666C6F776572  # "flower": the advisory lock every replica's migration takes
_LOCK_NOT_AVAILABLE = "55P03"
logging.getLogger("alembic").setLevel(logging.WARNING)  # its INFO lines are noise: the service logs registry.migrated


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision this code has."""
    found = ScriptDirectory.from_config(_config()).get_current_head()
    assert found is not None, "service/registry/migrations has no revision"
    return found


def current(connection: Connection) -> str | None:
    """The revision the database is at (None: never migrated by Alembic — empty, or a schema-3 SQLite file)."""
    return MigrationContext.configure(connection).get_current_revision()


def migrate(engine: Engine, *, where: str, lock_timeout_s: float = 60.0) -> tuple[str | None, str]:
    """Upgrade to ``head()``: (what it was found at when it was migrated — ``"none"`` for a database Alembic had
    not seen — or None when it was at head already, the revision it is at now)."""
    postgres = engine.dialect.name == "postgresql"
    try:
        with engine.begin() as connection:
            if postgres:
                connection.exec_driver_sql(f"SET LOCAL lock_timeout = '{int(lock_timeout_s * 1000)}ms'")
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
            _refuse_newer(connection, where)
            before = current(connection)
            if before == head():
                return None, before
            command.upgrade(_config(connection), "head")
            return before or "none", current(connection) or head()
    except OperationalError as e:
        if postgres and getattr(e.orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            raise RegistryLocked(
                f"the registry {where} is being migrated by another process that has held its lock for over "
                f"{lock_timeout_s:g} s: find that process (pg_stat_activity, the advisory lock {LOCK_KEY}) and "
                "stop it, then start again", where=where, waited_s=lock_timeout_s) from None
        raise


def _refuse_newer(connection: Connection, where: str) -> None:
    found = current(connection)
    if found is None:
        return
    try:
        ScriptDirectory.from_config(_config()).get_revision(found)
    except (CommandError, RevisionError):
        raise RegistryNewer(f"the registry {where} was migrated by a newer service (revision {found}, this one "
                            f"knows up to {head()}): upgrade the service, or point it at another database",
                            where=where, found=found, known=head()) from None

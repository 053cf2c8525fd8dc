"""Every way the registry's SQLite and PostgreSQL differ, in one place; the rest of the registry is plain Core.

    type of a float        REAL                            DOUBLE PRECISION
    64-bit counter         INTEGER (always 64-bit)         BIGINT
    bytes                  BLOB                            BYTEA
    upsert / insert-once   INSERT … ON CONFLICT            the same, through each dialect's ``insert``
    a field of JSON text   json_extract(c, '$.k')          CAST(c AS JSON) ->> 'k'
    a prefix of an id      substr(c, 1, n) = p             left(c, n) = p
    insertion order        rowid                           created, id (a table has no rowid)
    the connection         one file, WAL, busy_timeout,    a pool; errors name the host and database,
                           trusted_schema=OFF              never the password

The SQLite DDL is written here from the same ``Table``s (``sqlite_ddl``) in the very words a schema-3 file holds
(``id TEXT PRIMARY KEY``, ``NOT NULL DEFAULT 0``): ``registry.integrity.foreign`` compares a file's schema with a fresh
one, so the files older services wrote stay ours.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import REAL, BigInteger, Column, ColumnElement, Connection, DefaultClause, Double, Engine, Integer, \
    MetaData, Table, TextClause, cast, create_engine, event, func, literal_column
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool
from sqlalchemy.types import TypeEngine

__all__ = ["Int64", "Real", "Dialect", "sqlite_engine", "postgres_engine", "postgres_url", "describe", "insert",
           "json_text", "starts_with", "insertion_order", "sqlite_ddl", "sqlite_indexes", "sqlite_column"]

Dialect = Literal["sqlite", "postgresql"]
Int64: TypeEngine[int] = BigInteger().with_variant(Integer(), "sqlite")
Real: TypeEngine[float] = Double().with_variant(REAL(), "sqlite")

_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA busy_timeout=30000",
            "PRAGMA trusted_schema=OFF")


def sqlite_engine(path: Path) -> Engine:
    """One connection to the file (the registry serialises on its lock), in WAL; a transaction is a real
    ``BEGIN`` (pysqlite's own implicit one is turned off, so reads and DDL are inside it too)."""
    def connect() -> sqlite3.Connection:
        return sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)

    engine = create_engine("sqlite+pysqlite://", creator=connect, poolclass=StaticPool)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi: DBAPIConnection, _entry: ConnectionPoolEntry) -> None:
        cursor = dbapi.cursor()
        for pragma in _PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


def postgres_url(url: str) -> URL:
    """``postgresql://…`` (or ``postgres://``) as SQLAlchemy's URL for psycopg 3."""
    parsed = make_url(url.replace("postgres://", "postgresql://", 1) if url.startswith("postgres://") else url)
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"not a PostgreSQL URL (scheme {parsed.drivername!r}): give postgresql://user@host/db")
    return parsed.set(drivername="postgresql+psycopg")


def postgres_engine(url: URL) -> Engine:
    """A pool of connections; each is checked before use, so a database that restarted is reconnected to."""
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10, connect_args={"connect_timeout": 10})


def describe(url: URL) -> str:
    """Which database, for a sentence: its name and host, never the password."""
    host = url.host or url.query.get("host") or "the local socket"
    return f"PostgreSQL database {url.database or '(default)'!r} on {host}" + (f":{url.port}" if url.port else "")


def insert(table: Table, dialect: Dialect) -> sqlite.Insert | postgresql.Insert:
    """An INSERT that knows ``ON CONFLICT`` (both databases spell it the same; SQLAlchemy needs the dialect's)."""
    return sqlite.insert(table) if dialect == "sqlite" else postgresql.insert(table)


def json_text(column: ColumnElement[str], key: str, dialect: Dialect) -> ColumnElement[str]:
    """One top-level field of a TEXT column holding JSON, as text."""
    if dialect == "sqlite":
        return func.json_extract(column, f"$.{key}")
    field: ColumnElement[str] = cast(column, postgresql.JSON)[key].astext
    return field


def starts_with(column: ColumnElement[str], prefix: str, dialect: Dialect) -> ColumnElement[bool]:
    """``column`` begins with ``prefix``, byte for byte (never LIKE: SQLite's is case-blind, ``_`` is a wildcard)."""
    if dialect == "sqlite":
        return func.substr(column, 1, len(prefix)) == prefix
    return func.left(column, len(prefix)) == prefix


def insertion_order(table: Table, dialect: Dialect) -> list[ColumnElement[object]]:
    """The order rows were added in: SQLite's rowid; PostgreSQL has none, so (created, id)."""
    if dialect == "sqlite":
        return [literal_column("rowid")]
    return [table.c.created, table.c.id]


def sqlite_column(column: Column[Any]) -> str:
    """One column's definition as a schema-3 file spells it: ``name TYPE [PRIMARY KEY] [NOT NULL] [DEFAULT x]``."""
    kind = column.type.compile(dialect=sqlite.dialect())
    words = [f"{column.name:<15}", kind]  # the name padded as the schema-3 DDL aligned it
    single_key = column.primary_key and len(column.table.primary_key.columns) == 1
    if single_key:
        words.append("PRIMARY KEY")
    elif not column.nullable:
        words.append("NOT NULL")
    default = column.server_default
    if isinstance(default, DefaultClause) and isinstance(default.arg, TextClause):
        words.append(f"DEFAULT {default.arg.text}")
    return " ".join(words)


def sqlite_ddl(metadata: MetaData) -> list[str]:
    """CREATE TABLE and CREATE INDEX (IF NOT EXISTS) for SQLite, in the words today's files hold."""
    statements = []
    for table in metadata.sorted_tables:
        parts = [sqlite_column(c) for c in table.columns]
        keys = list(table.primary_key.columns)
        if len(keys) > 1:
            parts.append(f"PRIMARY KEY ({', '.join(c.name for c in keys)})")
        body = ",\n    ".join(parts)
        statements.append(f"CREATE TABLE IF NOT EXISTS {table.name} (\n    {body}\n)")
    return statements


def sqlite_indexes(metadata: MetaData) -> list[str]:
    """The indexes, after every column exists (``runs_folder`` is on a column added since version 1)."""
    statements = []
    for table in metadata.sorted_tables:
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            unique = "UNIQUE " if index.unique else ""
            columns = ", ".join(c.name for c in index.columns)
            statements.append(f"CREATE {unique}INDEX IF NOT EXISTS {index.name} ON {table.name} ({columns})")
    return statements

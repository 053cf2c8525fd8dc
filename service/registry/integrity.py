"""Whether a SQLite file is a registry of ours: nothing in it is believed because it is there. A file holding what
a registry of this service does not (a trigger, a view, another table or index, a column defined otherwise) is
refused at open and at ``restore``, and so is a row that names what is not its own (``rows.not_its_own``) or a
delivery of a run of another tenant. Here, apart from the database object, so that ``backup`` (which restores a
file) and the registry (which opens one) both use it and neither imports the other."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

import msgspec

from . import dialects
from .migrate import migrate
from .rows import Delivery, convert, not_its_own
from .tables import ADDED_SINCE_V1

__all__ = ["foreign"]


@functools.cache
def _fresh_schema() -> dict[str, tuple[str, str, str | None]]:
    """name → (type, table, sql) of what a fresh registry file holds: the migrations run on an empty database."""
    engine = dialects.sqlite_engine(Path(":memory:"))
    try:
        migrate(engine, where="a fresh registry")
        with engine.connect() as c:
            rows = c.exec_driver_sql("SELECT type, name, tbl_name, sql FROM sqlite_master").all()
    finally:
        engine.dispose()
    return {str(r[1]): (str(r[0]), str(r[2]), r[3]) for r in rows}


def _definitions(sql: str) -> list[str]:
    """A CREATE TABLE's column definitions and constraints, one by one, whitespace folded (split at the commas
    outside parentheses; a quoted comma only makes a definition that is not ours)."""
    body = sql[sql.index("(") + 1:sql.rindex(")")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [" ".join(p.split()) for p in parts if p.strip()]


def foreign(db: sqlite3.Connection) -> str | None:
    """What ``db`` holds that a registry of this service does not, as a phrase, or None when it is ours: its
    schema (``_foreign_schema``), then its rows — each naming only what is its own (``_not_its_own``), no two
    the same folder or handle."""
    return _foreign_schema(db) or _foreign_rows(db)


def _foreign_schema(db: sqlite3.Connection) -> str | None:
    """Compared with what a fresh registry creates: every trigger and view is foreign, so is any table or index
    we do not create or define otherwise, and any column not defined as ours (one we added since may be
    missing: an older service wrote the file)."""
    ours = _fresh_schema()
    for kind, name, table, sql in db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                                             "ORDER BY type DESC, name"):  # views and triggers first
        if kind in ("trigger", "view"):
            return f"a {kind} `{name}` (on {table}); a registry has none"
        if name not in ours or ours[name][:2] != (kind, table):
            what = f"an index `{name}` on {table}" if kind == "index" else f"a {kind} `{name}`"
            return f"{what} that a registry does not have"
        want = ours[name][2]
        if kind == "index" and (sql and " ".join(sql.split())) != (want and " ".join(want.split())):
            return f"the index `{name}` defined as {sql!r}, not as ours"
        if kind == "table":
            extra = [d for d in _definitions(sql) if d not in _definitions(want or "")]
            if extra:
                return f"the table `{name}` with `{extra[0]}`, which is not how a registry defines it"
            missing = [d.split()[0] for d in _definitions(want or "") if d not in _definitions(sql)]
            if missing and (name != "runs" or any(column not in ADDED_SINCE_V1 for column in missing)):
                return f"the table `{name}` without its `{missing[0]}`"
    return None


def _foreign_rows(db: sqlite3.Connection) -> str | None:
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone():
        return None  # nothing of ours yet: an empty file
    rows = db.cursor()
    rows.row_factory = sqlite3.Row
    seen: dict[tuple[str, str], str] = {}  # (what, value) → the run that names it
    for r in rows.execute("SELECT * FROM runs"):
        try:
            run = convert(r)
        except (msgspec.ValidationError, ValueError, TypeError) as e:
            return f"a row of runs that is not a run's ({e})"
        wrong = not_its_own(run)
        if wrong:
            return wrong
        for what, value in (("folder", run.folder), ("handle", run.handle)):
            other = seen.setdefault((what, value), run.id) if value is not None else run.id
            if other != run.id:
                return f"runs {other} and {run.id} both naming the {what} {value!r}"
    return _foreign_deliveries(db)


def _foreign_deliveries(db: sqlite3.Connection) -> str | None:
    """Each delivery is a delivery, of a run of the tenant it names (a restored file signs nothing else)."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'deliveries'").fetchone():
        return None
    rows = db.cursor()
    rows.row_factory = sqlite3.Row
    for r in rows.execute("SELECT d.*, runs.tenant AS owner FROM deliveries d LEFT JOIN runs ON runs.id = d.run"):
        fields = dict(r)
        owner = fields.pop("owner")
        try:
            d = msgspec.convert(fields, Delivery)
        except msgspec.ValidationError as e:
            return f"a row of deliveries that is not a delivery's ({e})"
        if owner != d.tenant:
            return (f"a webhook delivery {d.id!r} of tenant {d.tenant} for run {d.run}, which is not a run of that "
                    "tenant")
    return None

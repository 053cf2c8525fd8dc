"""The registry's schema is versioned (Alembic, ``registry/migrations``): a fresh database is migrated at open, a
SQLite file an older service wrote is upgraded in place with its rows, a newer schema is refused untouched, and
two replicas starting on one PostgreSQL database migrate it once."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from service.errors import RegistryLocked, RegistryNewer, RegistryUnreachable
from service.registry.migrate import LOCK_KEY, head
from service.registry import SCHEMA, Registry

ROOT = Path(__file__).resolve().parents[2]
RUN = "20260101-000000-" + "a" * 32

# What the service wrote before Alembic (registry.py at schema 3), word for word: a file of today's deployments.
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    ask             TEXT NOT NULL,
    options         TEXT NOT NULL DEFAULT '{}',
    status          TEXT NOT NULL,
    repo            TEXT NOT NULL DEFAULT '',
    handle          TEXT,
    branch          TEXT,
    base            TEXT,
    commit_sha      TEXT,
    created         REAL NOT NULL,
    started         REAL,
    ended           REAL,
    cost_usd        REAL NOT NULL DEFAULT 0,
    error           TEXT,
    step            TEXT,
    diffstat        TEXT,
    event_offset    INTEGER NOT NULL DEFAULT 0,
    event_seq       INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    disk_bytes      INTEGER,
    deleted         REAL
);
CREATE INDEX IF NOT EXISTS runs_tenant ON runs (tenant, created);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status, created);
CREATE TABLE IF NOT EXISTS spend (
    tenant          TEXT NOT NULL,
    day             TEXT NOT NULL,
    cost_usd        REAL NOT NULL DEFAULT 0,
    input_tokens    INTEGER NOT NULL DEFAULT 0,
    output_tokens   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, day)
);
CREATE TABLE IF NOT EXISTS deliveries (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    run             TEXT NOT NULL,
    event           TEXT NOT NULL,
    body            BLOB NOT NULL,
    created         REAL NOT NULL,
    state           TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_status     INTEGER,
    last_error      TEXT,
    next_try        REAL,
    ended           REAL
);
CREATE INDEX IF NOT EXISTS deliveries_tenant ON deliveries (tenant, created);
CREATE INDEX IF NOT EXISTS deliveries_state ON deliveries (state, created);
"""
OLD_ADDED = {"disk_bytes": "INTEGER", "deleted": "REAL",
             "input_tokens": "INTEGER NOT NULL DEFAULT 0", "output_tokens": "INTEGER NOT NULL DEFAULT 0",
             "cache_write_tokens": "INTEGER NOT NULL DEFAULT 0", "cache_read_tokens": "INTEGER NOT NULL DEFAULT 0",
             "claimed_cost_usd": "REAL NOT NULL DEFAULT 0", "token_sha256": "TEXT", "folder": "TEXT", "push": "TEXT"}
OLD_INDEXES = "CREATE UNIQUE INDEX IF NOT EXISTS runs_folder ON runs (folder);"


def _old_file(path: Path, *, schema: int = 3) -> Path:
    """A registry as the service before Alembic left it (schema 3), or as a version-1 service did (no added
    columns), holding one run and its day's spend."""
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    have = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    if schema == 3:
        for name, kind in OLD_ADDED.items():
            if name not in have:
                db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
        db.executescript(OLD_INDEXES)
    db.execute("INSERT INTO runs (id, tenant, ask, status, created, cost_usd) VALUES (?, 'acme', '旧的活', "
               "'succeeded', 1.5, 0.75)", (RUN,))
    db.execute("INSERT INTO spend (tenant, day, cost_usd) VALUES ('acme', '2026-01-01', 0.75)")
    db.execute(f"PRAGMA user_version={schema}")
    db.commit()
    db.close()
    return path


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as c:  # the fixture's postgresql://postgres@/db?host=DIR is a libpq URI as it is
        return {r[0] for r in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def test_a_fresh_sqlite_file_is_migrated_to_the_newest_revision(tmp_path: Path):
    reg = Registry(tmp_path / "registry.sqlite3")
    assert (reg.migrated_from, reg.revision) == ("none", head())
    reg.close()
    again = Registry(tmp_path / "registry.sqlite3")
    assert (again.migrated_from, again.revision) == (None, head()), "a migrated file is left as it is"
    again.close()
    db = sqlite3.connect(tmp_path / "registry.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA
    assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(head(),)]


def test_a_sqlite_file_at_v0001_gains_the_leases_table_and_keeps_its_rows(tmp_path: Path):
    reg = Registry(tmp_path / "registry.sqlite3")
    reg.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    reg.close()
    db = sqlite3.connect(tmp_path / "registry.sqlite3")  # as this morning's service left it: v0001, schema 3
    db.executescript("DROP TABLE leases; UPDATE alembic_version SET version_num = 'v0001'; PRAGMA user_version=3;")
    db.close()
    again = Registry(tmp_path / "registry.sqlite3")
    assert (again.migrated_from, again.revision) == ("v0001", head())
    assert again.runs.get(RUN) is not None and again.leases.unheld(now=0.0) == ()
    assert again.runs.begin(RUN, started=1.0) and again.leases.take(RUN, "me", ttl=5, now=1.0) is not None
    again.close()


def test_a_sqlite_file_at_v0003_gains_the_holds_and_streams_tables_and_keeps_its_rows(tmp_path: Path):
    reg = Registry(tmp_path / "registry.sqlite3")
    reg.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    reg.close()
    db = sqlite3.connect(tmp_path / "registry.sqlite3")  # as yesterday's service left it: v0003, schema 5
    db.executescript("DROP TABLE holds; DROP TABLE streams; UPDATE alembic_version SET version_num = 'v0003'; PRAGMA user_version=5;")
    db.close()
    again = Registry(tmp_path / "registry.sqlite3")
    assert (again.migrated_from, again.revision) == ("v0003", head())
    held = again.spend.hold("h1", run_id=RUN, tenant="acme", day="2026-01-01", amount=0.5, owner="gw", now=1.0, ttl=60,
                            run_cap=1.0, day_cap=None)
    assert held is not None and held.taken and again.runs.get(RUN) is not None
    assert again.streams.take("acme", "r1 s1", replica="r1", cap=1, now=1.0, ttl=60) == 0
    assert again.streams.take("acme", "r1 s2", replica="r1", cap=1, now=1.0, ttl=60) is None, "the cap is the slots"
    assert again.streams.release_all("r1") == 1 and again.streams.take("acme", "r1 s3", replica="r1", cap=1, now=1.0,
                                                                       ttl=60) == 0, "a replica started again lets go"
    again.close()


def test_a_sqlite_file_at_v0004_gains_the_replicas_table_and_keeps_its_rows(tmp_path: Path):
    reg = Registry(tmp_path / "registry.sqlite3")
    reg.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    reg.close()
    db = sqlite3.connect(tmp_path / "registry.sqlite3")  # as the service before names were held left it: v0004
    db.executescript("DROP TABLE replicas; UPDATE alembic_version SET version_num = 'v0004'; PRAGMA user_version=6;")
    db.close()
    again = Registry(tmp_path / "registry.sqlite3")
    assert (again.migrated_from, again.revision) == ("v0004", head())
    assert again.runs.get(RUN) is not None
    assert again.replicas.claim("r1", "i1", "", ttl=5, now=1.0).instance == "i1"
    assert again.replicas.claim("r1", "i2", "", ttl=5, now=2.0).instance == "i1", "held: the second is refused"
    again.close()
    db = sqlite3.connect(tmp_path / "registry.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA == 9


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_registry_at_v0006_gains_the_schedules_and_fires_tables_and_keeps_its_rows(
        tmp_path: Path, request: pytest.FixtureRequest, dialect: str):
    def open_() -> Registry:
        if dialect == "sqlite":
            return Registry(tmp_path / "registry.sqlite3")
        return Registry.postgres(request.getfixturevalue("postgres_empty_url"))

    reg = open_()
    reg.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    reg.close()
    # as the service before schedules left it: v0006
    if dialect == "sqlite":
        db = sqlite3.connect(tmp_path / "registry.sqlite3")
        db.executescript("DROP TABLE fires; DROP TABLE schedules; UPDATE alembic_version SET version_num = 'v0006'; "
                         "PRAGMA user_version=8;")
        db.close()
    else:
        with psycopg.connect(request.getfixturevalue("postgres_empty_url")) as c:
            c.execute("DROP TABLE fires")
            c.execute("DROP TABLE schedules")
            c.execute("UPDATE alembic_version SET version_num = 'v0006'")
    again = open_()
    assert (again.migrated_from, again.revision) == ("v0006", head())
    assert again.runs.get(RUN) is not None
    made = again.schedules.create(id="sch-1", tenant="acme", ask="a", options={}, cron="0 3 * * *", timezone="UTC",
                                  budget_usd=None, overlap="skip", created=1.0, next_at=2.0)
    assert again.schedules.get("sch-1") == made
    again.close()
    if dialect == "sqlite":
        db = sqlite3.connect(tmp_path / "registry.sqlite3")
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA == 9


def test_a_postgres_database_at_v0004_gains_the_replicas_table_and_keeps_its_rows(postgres_empty_url: str):
    reg = Registry.postgres(postgres_empty_url)
    reg.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    reg.close()
    with psycopg.connect(postgres_empty_url) as c:  # as the service before names were held left it: v0004
        c.execute("DROP TABLE replicas")
        c.execute("UPDATE alembic_version SET version_num = 'v0004'")
    assert "replicas" not in _tables(postgres_empty_url)
    again = Registry.postgres(postgres_empty_url)
    assert (again.migrated_from, again.revision) == ("v0004", head())
    assert again.runs.get(RUN) is not None and again.replicas.claim("r1", "i1", "", ttl=5, now=1.0).instance == "i1"
    again.close()


def test_a_fresh_postgres_database_is_migrated_to_the_newest_revision(postgres_empty_url: str):
    assert _tables(postgres_empty_url) == set()
    reg = Registry.postgres(postgres_empty_url)
    assert (reg.migrated_from, reg.revision) == ("none", head())
    reg.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    reg.close()
    assert _tables(postgres_empty_url) == {"runs", "spend", "deliveries", "leases", "wire_audit", "holds", "streams",
                                           "replicas", "schedules", "fires", "alembic_version"}


@pytest.mark.parametrize("schema", [3, 1])
def test_a_sqlite_file_an_older_service_wrote_is_upgraded_in_place_keeping_its_rows(tmp_path: Path, schema: int):
    path = _old_file(tmp_path / "registry.sqlite3", schema=schema)
    reg = Registry(path)
    assert (reg.migrated_from, reg.revision) == ("none", head())
    run = reg.runs.get(RUN)
    assert run is not None and (run.tenant, run.ask, run.status, run.cost_usd, run.folder) == \
        ("acme", "旧的活", "succeeded", 0.75, None)
    assert reg.spend.spent("acme", "2026-01-01")["cost_usd"] == 0.75
    reg.runs.update(RUN, folder="warm-0a", input_tokens=5)  # the columns added since version 1 are there
    reg.close()
    reopened = Registry(path)  # and the upgraded file is still one of ours (registry.integrity.foreign)
    assert reopened.runs.get(RUN).input_tokens == 5  # type: ignore[union-attr]
    reopened.close()


def test_a_sqlite_file_of_a_newer_schema_is_refused_and_left_untouched(tmp_path: Path):
    path = _old_file(tmp_path / "registry.sqlite3")
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA + 1}")
    db.commit()
    db.close()
    with pytest.raises(RegistryNewer) as refused:
        Registry(path)
    assert str(path) in str(refused.value) and f"newer service (schema {SCHEMA + 1})" in str(refused.value)
    assert (refused.value.found, refused.value.known) == (str(SCHEMA + 1), str(SCHEMA))
    db = sqlite3.connect(path)  # its schema untouched (opening it in WAL is all that happened to it)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA + 1
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'alembic_version'").fetchall() == []
    assert db.execute("SELECT id FROM runs").fetchall() == [(RUN,)]


def test_a_postgres_database_a_newer_service_migrated_is_refused(postgres_url: str):
    with psycopg.connect(postgres_url) as c:
        c.execute("UPDATE alembic_version SET version_num = 'v9999'")
    with pytest.raises(RegistryNewer) as refused:
        Registry.postgres(postgres_url)
    assert "v9999" in str(refused.value) and refused.value.found == "v9999" and refused.value.known == head()


def test_an_unreachable_database_is_named_without_its_password(tmp_path: Path):
    with pytest.raises(RegistryUnreachable) as away:
        Registry.postgres(f"postgresql://flower:s3cret-pw@/registry?host={tmp_path}")
    said = str(away.value)
    assert "s3cret-pw" not in said and "'registry'" in said and str(tmp_path) in said, said
    assert (away.value.host, away.value.database) == (str(tmp_path), "registry")


def test_a_migration_lock_held_too_long_is_a_clear_error_not_a_hang(postgres_empty_url: str):
    with psycopg.connect(postgres_empty_url) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        with pytest.raises(RegistryLocked) as stuck:
            Registry.postgres(postgres_empty_url, lock_timeout_s=0.5)
    assert "held its lock for over 0.5 s" in str(stuck.value) and stuck.value.waited_s == 0.5
    Registry.postgres(postgres_empty_url).close()  # once the holder is gone, it migrates


def test_two_processes_migrating_one_postgres_database_at_once_migrate_it_once(postgres_empty_url: str,
                                                                                tmp_path: Path):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenant]]\nname = "acme"\ntoken_sha256 = "' + "0" * 64 + f'"\nrepo = "{tmp_path}"\n')
    env = {**os.environ, "FLOWER_SERVICE_DATA_DIR": str(tmp_path / "data"), "FLOWER_SERVICE_TENANTS": str(tenants),
           "FLOWER_SERVICE_DATABASE_URL": postgres_empty_url}
    env.pop("FLOWER_SERVICE_CONFIG", None)
    both = [subprocess.Popen([sys.executable, "-m", "service", "migrate"], cwd=ROOT, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    said = [p.communicate(timeout=120) for p in both]
    assert [p.returncode for p in both] == [0, 0], said
    lines = sorted(out.strip() for out, _ in said)
    assert lines[0].startswith("migrated the registry") and f"from none to {head()}" in lines[0], lines
    assert lines[1].endswith(f"is at revision {head()} already"), lines
    with psycopg.connect(postgres_empty_url) as c:
        assert c.execute("SELECT version_num FROM alembic_version").fetchall() == [(head(),)]


def test_a_sqlite_file_and_a_postgres_database_at_v0005_gain_the_resume_columns_and_keep_their_rows(
        tmp_path: Path, postgres_empty_url: str):
    from service.registry import Loss

    loss = Loss(cause="vanished", at=3.0, error="its container is gone")
    reg = Registry(tmp_path / "registry.sqlite3")
    reg.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    reg.close()
    db = sqlite3.connect(tmp_path / "registry.sqlite3")  # as the service before runs were resumed left it: v0005
    for column in ("losses", "sandboxes", "parked_at", "wake_at", "not_before"):
        db.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    db.executescript("UPDATE alembic_version SET version_num = 'v0005'; PRAGMA user_version=7;")
    db.commit()
    db.close()
    pg = Registry.postgres(postgres_empty_url)
    pg.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    pg.close()
    with psycopg.connect(postgres_empty_url) as c:
        c.execute("ALTER TABLE runs DROP COLUMN losses, DROP COLUMN sandboxes, DROP COLUMN parked_at, "
                  "DROP COLUMN wake_at, DROP COLUMN not_before")
        c.execute("UPDATE alembic_version SET version_num = 'v0005'")
    for again in (Registry(tmp_path / "registry.sqlite3"), Registry.postgres(postgres_empty_url)):
        assert (again.migrated_from, again.revision) == ("v0005", head())
        run = again.runs.get(RUN)
        assert run is not None and (run.losses, run.sandboxes, run.parked_at) == ([], 0, None)
        again.runs.begin(RUN, started=1.0)
        again.runs.record_running(RUN, "h", sandboxes=1)
        assert again.runs.lost(RUN, [loss], not_before=2.0, sandboxes=1) is not None
        assert again.runs.get(RUN).losses == [loss]  # type: ignore[union-attr]
        again.close()
    assert sqlite3.connect(tmp_path / "registry.sqlite3").execute("PRAGMA user_version").fetchone()[0] == SCHEMA

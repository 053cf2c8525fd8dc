"""PostgreSQL for the registry tests: one server per session, one fresh database per test.

The server is Debian's PostgreSQL (``.ci/run`` installs it; the newest major under /usr/lib/postgresql), started in a temporary folder owned by the
``postgres`` user (the server refuses root), listening on a unix socket there and nowhere else. ``postgres_url``
is a database created from a template the migrations already ran on (``CREATE DATABASE … TEMPLATE``, a file
copy: fast); ``postgres_empty_url`` is one nothing has touched. Without PostgreSQL the tests that use them skip,
unless ``FLOWER_REQUIRE_POSTGRES=1``: then they fail (the rule ``FLOWER_REQUIRE_DOCKER`` follows).
``start_server`` / ``stop_server`` are the same server outside pytest (``bench/registry.py``).
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

def _bin() -> Path:
    """``$FLOWER_POSTGRES_BIN``, else the newest of Debian's /usr/lib/postgresql/<major>/bin."""
    if os.environ.get("FLOWER_POSTGRES_BIN"):
        return Path(os.environ["FLOWER_POSTGRES_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]) if
                   p.parts[-3].isdigit() else 0)
    return found[-1].parent if found else Path("/usr/lib/postgresql/15/bin")


BIN = _bin()
TEMPLATE = "flower_migrated"
_names = itertools.count(1)


@dataclass(frozen=True)
class PostgresServer:
    socket_dir: Path

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}"

    def admin(self, sql: str) -> None:
        """One statement outside a transaction (CREATE/DROP DATABASE), as the superuser."""
        import psycopg

        with psycopg.connect(host=str(self.socket_dir), dbname="postgres", user="postgres", autocommit=True) as c:
            c.execute(sql)  # the fixtures. own names, never input

    def fresh(self, *, migrated: bool) -> str:
        name = f"flower_test_{os.getpid()}_{next(_names)}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE if migrated else 'template0'}")
        return name


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def missing() -> str | None:
    if not (BIN / "initdb").is_file() or not (BIN / "pg_ctl").is_file():
        return f"no PostgreSQL server binaries in {BIN} (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "no `postgres` user to run the server as (the server refuses root)"
    return None


class PostgresDidNotStart(RuntimeError):
    pass


def start_server(prefix: str = "flower-pg-", *, template: bool = True) -> PostgresServer:
    """A throwaway server in a new temporary folder (``stop_server`` removes both), with the migrated template
    when ``template``. Raises ``PostgresDidNotStart`` (the folder removed) when it does not start."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
    root.chmod(0o700)
    run = lambda *a: subprocess.run([*_as_postgres(), *a], check=True, capture_output=True, text=True)  # noqa: E731
    server = PostgresServer(root)
    try:
        run(str(BIN / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", "postgres", "--no-sync")
        run(str(BIN / "pg_ctl"), "-D", str(root / "data"), "-o",
            f"-k {root} -c listen_addresses='' -c fsync=off -c max_connections=200", "-l", str(root / "log"),
            "-w", "start")
    except subprocess.CalledProcessError as e:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        stop_server(server)
        raise PostgresDidNotStart(f"PostgreSQL did not start: {e.stderr or e.stdout}\n{log[-2000:]}") from None
    except BaseException:  # Ctrl-C while it starts: the server (if up) and the folder go too
        stop_server(server)
        raise
    try:
        if template:
            server.admin(f"CREATE DATABASE {TEMPLATE}")
            from service.registry import Registry

            Registry.postgres(server.url(TEMPLATE)).close()  # migrated once; every test's database is a copy
    except BaseException:
        stop_server(server)
        raise
    return server


def stop_server(server: PostgresServer) -> None:
    """Stop the server (immediate: nothing in it is kept) and remove its folder."""
    root = server.socket_dir
    if (root / "data" / "postmaster.pid").exists():
        subprocess.run([*_as_postgres(), str(BIN / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "stop"],
                       capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    why = missing()
    if why is not None:
        if os.environ.get("FLOWER_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"FLOWER_REQUIRE_POSTGRES=1 but {why}")
        pytest.skip(f"{why} (set FLOWER_REQUIRE_POSTGRES=1 to make this a failure)")
    try:
        server = start_server()
    except PostgresDidNotStart as e:
        pytest.fail(str(e))
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A database of its own for this test, already migrated, dropped after it."""
    name = postgres_server.fresh(migrated=True)
    yield postgres_server.url(name)
    postgres_server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def postgres_empty_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A database of its own that nothing has migrated yet."""
    name = postgres_server.fresh(migrated=False)
    yield postgres_server.url(name)
    postgres_server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

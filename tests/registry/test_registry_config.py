"""``database_url`` (config file or FLOWER_SERVICE_DATABASE_URL) selects PostgreSQL; without it the registry is
the SQLite file in data_dir. Its password is never said; backup/restore, which copy SQLite files, refuse it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.config import ServiceConfigError, load_config
from service.registry import open_registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tenants(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text('[[tenant]]\nname = "acme"\ntoken_sha256 = "' + "0" * 64 + f'"\nrepo = "{tmp_path}"\n')
    return path


def test_database_url_comes_from_the_file_or_the_environment(tmp_path: Path, tenants: Path):
    file = tmp_path / "service.toml"
    file.write_text(f'data_dir = "data"\ntenants = "{tenants}"\ndatabase_url = "postgresql://f@db/a"\n')
    assert load_config(file, env={}).database_url == "postgresql://f@db/a"
    env = {"FLOWER_SERVICE_DATABASE_URL": "postgresql://f@db/b"}
    assert load_config(file, env=env).database_url == "postgresql://f@db/b"
    assert load_config(env={"FLOWER_SERVICE_DATA_DIR": str(tmp_path), "FLOWER_SERVICE_TENANTS": str(tenants)}
                       ).database_url is None


def test_a_database_url_that_is_not_postgresql_is_refused_without_its_password(tmp_path: Path, tenants: Path):
    with pytest.raises(ServiceConfigError) as refused:
        load_config(env={}, data_dir=str(tmp_path), tenants=str(tenants), database_url="mysql://u:pw-123@h/db")
    assert "postgresql://" in str(refused.value) and "pw-123" not in str(refused.value)


def test_open_registry_is_sqlite_in_data_dir_unless_database_url_says_postgresql(tmp_path: Path, tenants: Path,
                                                                                 postgres_url: str):
    sqlite = open_registry(load_config(env={}, data_dir=str(tmp_path / "data"), tenants=str(tenants)))
    assert (sqlite.dialect, sqlite.path) == ("sqlite", tmp_path / "data" / "registry.sqlite3")
    sqlite.close()
    pg = open_registry(load_config(env={}, data_dir=str(tmp_path / "data"), tenants=str(tenants),
                                   database_url=postgres_url))
    assert pg.dialect == "postgresql" and pg.path is None and "PostgreSQL database" in pg.where
    pg.close()


@pytest.mark.parametrize("verb", ["backup", "restore"])
def test_backup_and_restore_refuse_a_postgresql_registry_and_point_to_pg_dump(tmp_path: Path, tenants: Path,
                                                                              verb: str):
    env = {**os.environ, "FLOWER_SERVICE_DATA_DIR": str(tmp_path / "data"), "FLOWER_SERVICE_TENANTS": str(tenants),
           "FLOWER_SERVICE_DATABASE_URL": "postgresql://flower:pw-456@db.internal/flower"}
    env.pop("FLOWER_SERVICE_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "service", verb, str(tmp_path / "copy.sqlite3")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "pg_dump" in done.stderr and "pw-456" not in done.stderr + done.stdout
    assert not (tmp_path / "copy.sqlite3").exists()

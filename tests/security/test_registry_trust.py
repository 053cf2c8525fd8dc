"""Issue 21, item 9: nothing in a registry file is believed about the host because it is there. Found by restoring
crafted registries: a trigger handed every run of one tenant to another; a row whose folder named another tenant's
run let a DELETE remove that run's files; a `running` row whose handle named an unrelated host pid got that process
SIGKILLed when the service started. Everything here goes through ``python -m service`` as an operator runs it."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _service_helpers import ROOT, Deployment, Service, wait_status
from service.registry import Registry

pytestmark = pytest.mark.cli

ACME_RUN = "20260101-000000-" + "a" * 32
BETA_RUN = "20260101-000001-" + "b" * 32


def _service(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLOWER_SERVICE_CONFIG": str(deployment.config)}
    return subprocess.run([sys.executable, "-m", "service", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def _registry(path: Path, deployment: Deployment, *rows: tuple[str, str, str]) -> Path:
    """A registry as this service writes it, with ``rows`` of (id, tenant, status); the tenant's repo on each."""
    registry = Registry(path)
    for run_id, tenant, status in rows:
        registry.runs.create(id=run_id, tenant=tenant, ask=f"{tenant} 的活", options={}, repo=str(deployment.repos[tenant]))
        registry.runs.update(run_id, status=status, started=time.time(), branch=f"flower/{run_id}")
    registry.close()
    return path


def _crafted(genuine: Path, name: str, *sql: str) -> Path:
    """A copy of ``genuine`` changed as an attacker would, with SQLite itself."""
    path = genuine.with_name(f"{name}.sqlite3")
    shutil.copy(genuine, path)
    db = sqlite3.connect(path)
    try:
        for statement in sql:
            db.execute(statement)
        db.commit()
    finally:
        db.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_restore_refuses_a_registry_holding_what_ours_does_not_and_the_service_will_not_start_on_one(
        tmp_path: Path):
    dep = Deployment(tmp_path)
    runs = (dep.data / "runs").resolve()
    live = _registry(dep.data / "registry.sqlite3", dep, (ACME_RUN, "acme", "succeeded"))
    (runs / ACME_RUN).mkdir(parents=True)
    (runs / ACME_RUN / "acme-only.txt").write_text("acme's work\n")
    genuine = _registry(tmp_path / "backups" / "genuine.sqlite3", dep, (ACME_RUN, "acme", "succeeded"),
                        (BETA_RUN, "beta", "succeeded"))
    before = _digest(live)
    repo_column = "repo            TEXT NOT NULL DEFAULT ''"
    crafted = {
        "a trigger `hand_over` (on runs)": _crafted(genuine, "trigger", (
            "CREATE TRIGGER hand_over AFTER INSERT ON runs BEGIN "
            "UPDATE runs SET tenant = 'beta' WHERE tenant = 'acme'; END")),
        "a view `everyone`": _crafted(genuine, "view", "CREATE VIEW everyone AS SELECT * FROM runs"),
        "a table `notes` that a registry does not have": _crafted(genuine, "table", "CREATE TABLE notes (x TEXT)"),
        "an index `runs_ask` on runs": _crafted(genuine, "index", "CREATE INDEX runs_ask ON runs (ask)"),
        "the table `runs` with `owner TEXT`": _crafted(genuine, "column", "ALTER TABLE runs ADD COLUMN owner TEXT"),
        "`repo TEXT NOT NULL DEFAULT '' COLLATE NOCASE`": _crafted(  # a column redefined in place
            genuine, "collate", "PRAGMA writable_schema = ON",
            f"UPDATE sqlite_master SET sql = replace(sql, \"{repo_column}\", \"{repo_column} COLLATE NOCASE\") "
            "WHERE name = 'runs'"),
        f"run {BETA_RUN} (tenant beta) naming the folder '{ACME_RUN}'": _crafted(
            genuine, "foreign-folder", f"UPDATE runs SET folder = '{ACME_RUN}' WHERE id = '{BETA_RUN}'"),
        "the id 'warm-0123abcd', which no service gives": _crafted(
            genuine, "slot-id", f"UPDATE runs SET id = 'warm-0123abcd' WHERE id = '{BETA_RUN}'"),
        f"runs {ACME_RUN} and {BETA_RUN} both naming the folder 'warm-00ff'": _crafted(
            genuine, "shared-slot", "DROP INDEX IF EXISTS runs_folder", "UPDATE runs SET folder = 'warm-00ff'"),
        f"whose handle names the folder '{runs / ACME_RUN}', not its own": _crafted(
            genuine, "foreign-handle", f"UPDATE runs SET handle = 'local:1:1:{runs / ACME_RUN}' "
                                       f"WHERE id = '{BETA_RUN}'"),
    }
    for found, path in crafted.items():
        refused = _service(dep, "restore", str(path))
        sentence = refused.stderr.strip().splitlines()[-1] if refused.stderr.strip() else ""
        assert refused.returncode == 2, (found, refused.stdout, refused.stderr[-2000:])
        assert found in sentence and "pick a backup `python -m service backup` made" in sentence, (found, sentence)
        assert _digest(live) == before and not list(dep.data.glob("*.damaged-*")), "the registry is left as it was"

    # a crafted file put in place by hand (not restored) stops the service at start, with the way back
    shutil.copy(crafted[f"run {BETA_RUN} (tenant beta) naming the folder '{ACME_RUN}'"], live)
    refused = _service(dep, "--port", "0")
    sentence = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 2 and str(live) in sentence and f"naming the folder '{ACME_RUN}'" in sentence
    assert "python -m service restore" in sentence, sentence
    assert (runs / ACME_RUN / "acme-only.txt").read_text() == "acme's work\n", "acme's run folder is untouched"

    restored = _service(dep, "restore", str(genuine))  # and a registry of ours restores as before
    assert restored.returncode == 0, restored.stderr


def _start_time(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rindex(")") + 2:].split()[19])


def test_a_running_row_whose_handle_names_an_unrelated_host_process_never_gets_it_signalled(
        tmp_path: Path, services: list[Service]):
    dep = Deployment(tmp_path)
    runs = (dep.data / "runs").resolve()
    bystander = subprocess.Popen(["sleep", "600"], start_new_session=True)  # a host process nothing to do with us
    try:
        pid, started = bystander.pid, _start_time(bystander.pid)
        old_style = "20260101-000002-" + "c" * 32
        backup = _registry(tmp_path / "backups" / "handles.sqlite3", dep, (ACME_RUN, "acme", "running"),
                           (old_style, "acme", "running"))
        db = sqlite3.connect(backup)
        with db:  # the pid and its true start time; and a handle of no start time, naming the same pid
            db.execute("UPDATE runs SET handle = ? WHERE id = ?", (f"local:{pid}:{started}:{runs / ACME_RUN}",
                                                                   ACME_RUN))
            db.execute("UPDATE runs SET handle = ? WHERE id = ?", (f"local:{pid}:0:{runs / old_style}", old_style))
        db.close()
        restored = _service(dep, "restore", str(backup))
        assert restored.returncode == 0, restored.stderr  # a handle is data; what it names is checked when used

        service = Service(dep).start()
        services.append(service)
        acme = service.client("acme")
        for run_id in (ACME_RUN, old_style):  # lost, then not resumable: the folder its handle named never was
            failed = wait_status(acme, run_id, ("failed",), timeout=60)
            assert "no longer has this run's sandbox" in failed["losses"][0]["error"], failed
            assert "cannot be resumed: its checkout" in failed["error"], failed
        assert bystander.poll() is None, f"the host process was signalled ({bystander.returncode})"
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state in ("S", "R"), f"the host process is {state}, not left running"
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait(10)

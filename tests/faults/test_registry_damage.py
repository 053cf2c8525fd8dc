"""Item 5: a truncated registry file at start is detected; the service refuses with a sentence naming the file and
the way back; ``python -m service backup`` (live) and ``restore`` bring every run back."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _faults import figures
from _service_helpers import ROOT, Deployment, Service, gateway_pid, serve, stop_gateway, wait_question
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ASK, BRIEF, CLARIFIER

pytestmark = pytest.mark.cli


def _service(deployment: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLOWER_SERVICE_CONFIG": str(deployment.config)}
    return subprocess.run([sys.executable, "-m", "service", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_truncated_registry_is_refused_with_the_way_back_and_restore_loses_no_run(tmp_path: Path,
                                                                                    services: list[Service]):
    deployment = Deployment(tmp_path, quota=1, max_running=1)
    rules = [Rule(tool(ASK, {"question": "用什么语言?"}), system=CLARIFIER), Rule(say(BRIEF), system=CLARIFIER)]
    with ScriptedModel(rules) as model:
        first = serve(deployment, services, model, "first", timeout=180)
        acme = first.client("acme")
        ids = [acme.post("/v1/runs", json={"ask": f"任务{i}", "options": {"clarify_only": True}}).json()["id"]
               for i in range(3)]
        wait_question(acme, ids[0])  # one running (its question open), two queued behind the quota
        before = {r["id"]: r["status"] for r in acme.get("/v1/runs").json()["runs"]}
        backup = tmp_path / "backups" / "registry-1.sqlite3"
        made = _service(deployment, "backup", str(backup))  # while the service runs
        assert made.returncode == 0, made.stderr
        assert "backed up" in made.stdout and backup.is_file() and backup.stat().st_mode & 0o077 == 0
        first.stop()

    db = deployment.data / "registry.sqlite3"
    size = db.stat().st_size
    with open(db, "r+b") as f:  # the fault: the file cut short (a full disk, a bad copy, a crash mid-write)
        f.truncate(size // 2)
    refused = _service(deployment, "--port", "0")
    assert refused.returncode == 2, (refused.returncode, refused.stderr[-2000:])
    sentence = refused.stderr.strip().splitlines()[-1]
    assert str(db) in sentence and "damaged" in sentence and "python -m service restore" in sentence, sentence
    assert db.stat().st_size == size // 2, "the damaged file is left as it was"

    assert _service(deployment, "restore", str(db)).returncode == 2, "a damaged file is never restored from"
    t0 = time.monotonic()
    restored = _service(deployment, "restore", str(backup))
    restore_s = time.monotonic() - t0
    assert restored.returncode == 0, restored.stderr
    aside = sorted(deployment.data.glob("registry.sqlite3.damaged-*"))
    assert aside and aside[0].stat().st_size == size // 2, "the damaged registry is moved aside, not deleted"

    with ScriptedModel(rules) as model:
        second = serve(deployment, services, model, "second", timeout=180)
        after = {r["id"]: r["status"] for r in second.client("acme").get("/v1/runs").json()["runs"]}
    assert set(after) == set(before) == set(ids), (before, after)
    lost = len(set(before) - set(after))
    figures("registry_damage", runs_before=len(before), runs_after_restore=len(after), runs_lost=lost,
            recover_s=round(restore_s, 2), registry_bytes=size, truncated_to=size // 2)


def _ids(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {row[0] for row in conn.execute("SELECT id FROM runs")}
    finally:
        conn.close()


def test_restore_under_a_live_service_is_refused_naming_it_and_a_dead_one_does_not_block_it(
        tmp_path: Path, services: list[Service]):
    deployment = Deployment(tmp_path, quota=1, max_running=1)
    db = deployment.data / "registry.sqlite3"
    rules = [Rule(tool(ASK, {"question": "用什么语言?"}), system=CLARIFIER), Rule(say(BRIEF), system=CLARIFIER)]
    with ScriptedModel(rules) as model:
        live = serve(deployment, services, model, "live", timeout=180)
        acme = live.client("acme")

        def submit(ask: str) -> str:
            r = acme.post("/v1/runs", json={"ask": ask, "options": {"clarify_only": True}})
            assert r.status_code == 201, r.text
            return str(r.json()["id"])

        first = submit("任务一")
        wait_question(acme, first)
        backup = tmp_path / "backups" / "registry.sqlite3"
        assert _service(deployment, "backup", str(backup)).returncode == 0
        second = submit("任务二")  # after the backup: what a restore now would lose

        refused = _service(deployment, "restore", str(backup))
        sentence = refused.stderr.strip().splitlines()[-1] if refused.stderr.strip() else ""
        assert refused.returncode == 2, (refused.stdout, refused.stderr[-2000:])
        assert live.proc is not None and f"the service (pid {live.proc.pid}; stop it with `kill {live.proc.pid}`" \
            in sentence, sentence
        gateway = gateway_pid(deployment.data)
        assert gateway is not None and f"the model gateway (pid {gateway};" in sentence, sentence
        assert str(db) in sentence and "run the restore again" in sentence, sentence
        assert not list(deployment.data.glob("registry.sqlite3.*-*")), "nothing moved aside, nothing renamed"

        third = submit("任务三")  # the service goes on in the same file
        listed = {r["id"] for r in acme.get("/v1/runs").json()["runs"]}
        assert {first, second, third} <= listed, listed
        live.stop(signal.SIGKILL)  # dead processes: the kernel drops their locks, no heartbeat to wait out
        stop_gateway(deployment.data, signal.SIGKILL)

    restored = _service(deployment, "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    kept = sorted(deployment.data.glob("registry.sqlite3.replaced-*"))
    assert len(kept) == 1 and "was sound and is kept as" in restored.stdout, (restored.stdout, kept)
    assert not list(deployment.data.glob("registry.sqlite3.damaged-*")), "a sound registry is never called damaged"
    assert _ids(kept[0]) == {first, second, third}, "the replaced registry keeps every run, its WAL included"
    assert _ids(db) == {first}, "the backup is in place"

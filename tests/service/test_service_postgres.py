"""The whole service on the PostgreSQL registry (``database_url``), as an operator runs it: a run goes through, its
row is in the database and not in a SQLite file, a restart finds it, and the URL's password is said nowhere."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from _service_helpers import Deployment, Service, serve, wait_question
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ASK, BRIEF, CLARIFIER

pytestmark = pytest.mark.cli


def test_a_service_on_postgresql_keeps_its_runs_there_across_a_restart_and_never_says_the_password(
        tmp_path: Path, services: list[Service], postgres_url: str):
    with_password = postgres_url.replace("postgresql://postgres@", f"postgresql://postgres:{quote('pw-Zq9')}@", 1)
    deployment = Deployment(tmp_path, extra_config=f"database_url = {with_password!r}\n".replace("'", '"'))
    rules = [Rule(tool(ASK, {"question": "用什么语言?"}), system=CLARIFIER), Rule(say(BRIEF), system=CLARIFIER)]
    with ScriptedModel(rules) as model:
        first = serve(deployment, services, model, "first", timeout=180)
        acme = first.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "问一个问题", "options": {"clarify_only": True}}).json()["id"]
        wait_question(acme, run_id)
        health = acme.get("/healthz").text
        first.stop()
        second = serve(deployment, services, model, "second", timeout=180)
        after = [r["id"] for r in second.client("acme").get("/v1/runs").json()["runs"]]
        second.stop()
    assert after == [run_id]
    with psycopg.connect(postgres_url) as c:
        assert c.execute("SELECT tenant FROM runs WHERE id = %s", (run_id,)).fetchall() == [("acme",)]
    assert not (deployment.data / "registry.sqlite3").exists(), "no SQLite registry beside it"
    logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    started = [line for line in logs.splitlines() if "service.started" in line]
    assert started and "PostgreSQL database" in started[0], started
    assert "pw-Zq9" not in logs + health

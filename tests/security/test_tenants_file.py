"""The tenants file as the operator edits it, while runs are live: an edit that does not parse leaves the last good
file in force — tokens and budgets included — and a tenant removed from a file that parses loses its live runs and
their use of its key at once. Through the real service, CLI and local sandboxes."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from _service_helpers import Deployment, Service, wait_for, wait_question, wait_status
from _hostile import ENDED, hostile_deployment
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.envfile import read_env_file
from sandbox.testing import ASK, CLARIFIER

pytestmark = pytest.mark.cli

PRICES = 'prices = { "flower-test-model" = [2.0, 10.0] }\n'
BIG = {"input_tokens": 150_000, "output_tokens": 1_000}  # $0.30 + $0.01 at 2/10 per million: $0.31


def only(dep: Deployment, name: str, **override: dict) -> None:
    """The tenants file with ``name`` alone in it."""
    dep.write_tenants(**override)
    path = dep.root / "tenants.toml"
    blocks = path.read_text().split("[[tenant]]\n")
    path.write_text("".join("[[tenant]]\n" + b for b in blocks if f'name = "{name}"' in b))


def test_a_broken_tenants_file_keeps_budgets_and_a_removed_tenant_loses_its_runs(
        tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    dep.config.write_text(dep.config.read_text() + PRICES)
    budget = {"acme": {"budget_usd.run": 0.70}}  # the CLI's calls may cost ~$0.46 each: no room for one after BIG
    dep.write_tenants(**budget)
    rules = [Rule(tool(ASK, {"question": "花钱吗?", "options": ["花"]}), system=CLARIFIER, prompt="花钱的活"),
             Rule(say("还想问一句?", usage=BIG), system=CLARIFIER, prompt="花钱的活", result="花"),
             Rule(tool(ASK, {"question": "等着?"}), system=CLARIFIER, prompt="等着的活")]
    with ScriptedModel(rules) as model:
        for path in dep.creds.values():
            values = {**model.env, "ANTHROPIC_MODEL": "flower-test-model",
                      "ANTHROPIC_SMALL_FAST_MODEL": "flower-test-model"}
            path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        service = Service(dep).start(timeout=120)
        services.append(service)
        acme, beta = service.client("acme"), service.client("beta")
        options = {"clarify_only": True, "timeout_s": 300}
        a = acme.post("/v1/runs", json={"ask": "花钱的活", "options": options}).json()["id"]
        b = beta.post("/v1/runs", json={"ask": "等着的活", "options": options}).json()["id"]
        qa, _ = wait_question(acme, a), wait_question(beta, b)

        (dep.root / "tenants.toml").write_text("[[tenant]\nname = ")  # an edit half-way
        wait_for(lambda: [x for x in service.lines() if x.get("event") == "tenants.reload_failed"], timeout=30,
                 what="the broken edit to be noticed")
        assert acme.get(f"/v1/runs/{a}").status_code == 200, "the last good file's tokens still work"
        r = acme.post(f"/v1/runs/{a}/answers", json={"question_id": qa["id"], "text": "花"})
        assert r.status_code == 200, r.text
        spent = wait_status(acme, a, ENDED, timeout=120)
        assert spent["status"] == "failed" and re.search(r"over budget: this run has spent \$0\.31\d* of its \$0\.70 "
                                                         "per-run budget", spent["error"]), spent
        paid = [r for r in model.requests if r.usage and r.usage["input_tokens"] == BIG["input_tokens"]]
        assert len(paid) == 1, "the budget held while the file did not parse: no request after the one that filled it"

        env = read_env_file(dep.data / "runs" / b / "mailbox" / "flower.env")
        token = env["ANTHROPIC_API_KEY"]
        only(dep, "acme", **budget)  # beta leaves
        ended = wait_for(lambda: (lambda row: row if row["status"] in ENDED else None)(_row(service, b)),
                         timeout=60, what="beta's run to be stopped")
        assert ended["status"] == "failed" and "removed from the tenants file" in ended["error"], ended
        assert beta.get("/v1/runs").status_code == 401, "and its token with it"
        with httpx.Client(transport=httpx.HTTPTransport(uds=env["FLOWER_GATEWAY_SOCKET"]), timeout=10) as c:
            try:
                status = c.post("http://gateway/v1/messages", headers={"x-api-key": token}, json={}).status_code
            except httpx.TransportError:
                status = None  # the run's socket is closed
        assert status in (None, 401, 403), status
        lines = service.lines()
    assert [x for x in lines if x.get("event") == "run.tenant_removed" and x.get("run") == b]
    assert not [x for x in lines if x.get("event") in ("run.poisoned", "scheduler.tick_failed")]


def _row(service: Service, run_id: str) -> dict:
    """A run's row as the operator sees it, whatever its tenant's token is now (the registry file)."""
    import sqlite3

    db = service.deployment.data / "registry.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT status, error, repo FROM runs WHERE id = ?", (run_id,)).fetchone()
    return dict(row)


def test_a_tenant_repo_that_is_a_symlink_to_another_tenants_is_refused_at_start_and_on_reload(
        tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    link = dep.root / "repos" / "beta-link"
    link.symlink_to(dep.repos["acme"])
    dep.write_tenants(beta={"repo": str(link)})
    with pytest.raises(AssertionError, match="goes through a symlink") as refused:
        Service(dep).start(timeout=60)
    assert "name the repository's real path" in str(refused.value)

    dep.write_tenants()
    service = Service(dep, "fixed").start(timeout=60)
    services.append(service)
    dep.write_tenants(beta={"repo": str(dep.repos["acme"])})  # the same repository, named plainly
    reload = wait_for(lambda: [x for x in service.lines() if x.get("event") == "tenants.reload_failed"], timeout=30,
                      what="the shared repository to be refused")
    assert "share a repository" in reload[0]["error"] and "last good tenants file stays in force" in reload[0]["error"]
    r = service.client("beta").post("/v1/runs", json={"ask": "x", "options": {"clarify_only": True}})
    assert r.status_code == 201, r.text
    assert _row(service, r.json()["id"])["repo"] == str(dep.repos["beta"]), "beta's run is on its own repository"

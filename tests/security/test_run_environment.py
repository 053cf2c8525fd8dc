"""A run's environment is an allow-list: whatever else the operator keeps in a tenant's credentials file — a
database password, a GitHub token, an npm credential, under any name — reaches no run. Seen from inside the run
(its worker's Bash), through the real service and CLI."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from _service_helpers import Service, wait_status
from _hostile import DONE, ENDED, hostile_deployment, worker_rules
from flower.testing import ScriptedModel

pytestmark = pytest.mark.cli

OTHER = {name: f"other-secret-{uuid.uuid4().hex}" for name in ("DB_PASSWD", "GITHUB_PAT", "NPM_AUTH", "PGPASS",
                                                               "MY_APP_CONFIG", "AWS_ACCESS_KEY_ID")}


def test_only_allowed_names_reach_a_run(tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    probe = " ".join(OTHER.values())
    script = f"""set +e
for v in {probe}; do echo "ENV $(env | grep -c $v) FILE $(grep -c $v "$FLOWER_ENV")"; done
echo MODEL=$ANTHROPIC_MODEL RETRIES=$CLAUDE_CODE_MAX_RETRIES
echo {DONE}"""
    with ScriptedModel(worker_rules("看环境", script)) as model:
        for path in dep.creds.values():
            values = {**model.env, "ANTHROPIC_MODEL": "flower-test-model", "CLAUDE_CODE_MAX_RETRIES": "1", **OTHER}
            path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        service = Service(dep).start(timeout=120)
        services.append(service)
        acme = service.client("acme")
        run = acme.post("/v1/runs", json={"ask": "看环境", "options": {"rounds": 1, "timeout_s": 60}}).json()["id"]
        final = wait_status(acme, run, ENDED, timeout=180)
        lines = service.lines()
    out = max((r["text"] for req in model.conversation for r in req.results if DONE in r["text"]), key=len)
    assert final["status"] == "succeeded", final
    counts = [line for line in out.splitlines() if line.startswith("ENV ")]
    assert counts == ["ENV 0 FILE 0"] * len(OTHER), out
    assert "MODEL=flower-test-model RETRIES=1" in out, "the model names and CLI switches still reach the run"
    left = [x for x in lines if x.get("event") == "tenant.env_left_out" and x.get("tenant") == "acme"]
    assert left and set(OTHER) <= set(left[0]["names"]), left
    assert not any(v in str(left) for v in OTHER.values()), "names only, never a value"

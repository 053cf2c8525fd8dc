"""/v1/schedules and /v1/triggers on the real service (``python -m service``, LocalBackend, scripted model): bad
schedules refused with a sentence and nothing made; a schedule listed, paused, resumed and deleted; a minute-level
cron's run started by the service itself, stopped at the schedule's budget, and saying what fired it; a trigger
fired ten times at once starts its minute's worth of runs and answers 429 to the rest, with its ask and the text;
a revoked token, or a tenant's, is a 401."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import httpx
import pytest

from _service_helpers import TOKENS, Deployment, Service, wait_for, wait_status
from flower.testing import Rule, ScriptedModel, say
from sandbox.testing import BRIEF, CLARIFIER, GOAL, JUDGE

pytestmark = pytest.mark.cli

ENDED = ("succeeded", "failed", "cancelled", "aborted", "killed")


def start(dep: Deployment, services: list[Service], model: ScriptedModel, **env: str) -> Service:
    dep.set_credentials({**model.env, **env})
    service = Service(dep).start(timeout=120)
    services.append(service)
    return service


def test_a_schedule_that_cannot_be_kept_is_a_400_and_one_that_can_is_listed_paused_resumed_and_deleted(
        tmp_path: Path, services: list[Service]) -> None:
    dep = Deployment(tmp_path)
    dep.write_tenants(acme={"budget_usd.run": 5.0})
    service = Service(dep).start(timeout=120)
    services.append(service)
    acme = service.client("acme")
    for body, says in [
        ({"ask": "x", "cron": "*/1 * * * *"}, "fires every 60 s at times, more often than this tenant may schedule "
                                              "(every 300 s at most): space its ticks out"),
        ({"ask": "x", "cron": "0 3 * * *", "timezone": "Europe/Atlantis"}, "timezone 'Europe/Atlantis' does not "
                                                                           "exist"),
        ({"ask": "x", "cron": "0 3 * *"}, "cron expression '0 3 * *' does not parse"),
        ({"ask": "x", "cron": "0 3 * * *", "budget_usd": 6}, "budget_usd 6 is more than tenant acme's per-run "
                                                             "budget (5)"),
        ({"ask": "x", "cron": "0 3 * * *", "overlap": "pile-up"}, "overlap"),
    ]:
        r = acme.post("/v1/schedules", json=body)
        assert r.status_code == 400 and says in r.json()["error"], (body, r.text)
    assert acme.get("/v1/schedules").json() == {"schedules": []}, "nothing was made"

    r = acme.post("/v1/schedules", json={"ask": "看看昨晚不稳定的测试", "cron": "0 3 * * 1-5",
                                         "timezone": "Europe/Paris", "budget_usd": 2.0, "overlap": "queue"})
    assert r.status_code == 201, r.text
    made = r.json()
    assert r.headers["location"] == f"/v1/schedules/{made['id']}"
    assert (made["cron"], made["timezone"], made["budget_usd"], made["overlap"], made["paused"], made["trigger"],
            made["trigger_token"]) == ("0 3 * * 1-5", "Europe/Paris", 2.0, "queue", False, False, None)
    assert made["next_at"].endswith(":00:00.000Z") and made["history"] == []
    assert [s["id"] for s in acme.get("/v1/schedules").json()["schedules"]] == [made["id"]]
    assert service.client("beta").get(f"/v1/schedules/{made['id']}").status_code == 404, "another tenant's"
    assert service.client("beta").get("/v1/schedules").json() == {"schedules": []}
    paused = acme.post(f"/v1/schedules/{made['id']}/pause").json()
    assert paused["paused"] is True and paused["next_at"] is None
    resumed = acme.post(f"/v1/schedules/{made['id']}/resume").json()
    assert resumed["paused"] is False and resumed["next_at"] == made["next_at"]
    assert acme.delete(f"/v1/schedules/{made['id']}").status_code == 200
    assert acme.get(f"/v1/schedules/{made['id']}").status_code == 404
    assert acme.get("/v1/schedules").json() == {"schedules": []}


def test_a_minute_cron_runs_by_itself_stops_at_its_budget_and_a_trigger_starts_its_rate_and_429s_the_rest(
        tmp_path: Path, services: list[Service]) -> None:
    dep = Deployment(tmp_path, max_running=4, quota=4,
                     extra_config='prices = { "flower-test-model" = [2.0, 10.0] }\ntrigger_per_minute = 3\n')
    dep.write_tenants(acme={"schedule_min_interval_s": 60})
    big = {"input_tokens": 150_000, "output_tokens": 1_000}  # $0.31: no room for the CLI's next call in $0.70
    rules = [Rule(say("还想问一句?", usage=big), system=CLARIFIER, prompt="花钱的活"),
             Rule(say(BRIEF, usage={"input_tokens": 100, "output_tokens": 10}), system=CLARIFIER, prompt="CI 挂了"),
             Rule(say(GOAL), system=JUDGE)]
    with ScriptedModel(rules) as model:
        service = start(dep, services, model, ANTHROPIC_MODEL="flower-test-model",
                        ANTHROPIC_SMALL_FAST_MODEL="flower-test-model")
        acme = service.client("acme")
        nightly = acme.post("/v1/schedules", json={
            "ask": "花钱的活", "options": {"clarify_only": True, "rounds": 1}, "cron": "* * * * *", "budget_usd": 0.70,
            "overlap": "skip"}).json()
        fired = wait_for(lambda: [f for f in acme.get(f"/v1/schedules/{nightly['id']}").json()["history"]
                                  if f["outcome"] != "firing"], 90, what="the schedule's first tick to start its run")
        run_id = fired[0]["run"]
        assert (fired[0]["fired_by"], fired[0]["outcome"], fired[0]["budget_usd"]) == ("schedule", "started", 0.70)
        run = wait_status(acme, run_id, ENDED, timeout=180)
        acme.post(f"/v1/schedules/{nightly['id']}/pause")

        ci = acme.post("/v1/schedules", json={"ask": "CI 挂了, 修一下", "options": {"clarify_only": True, "rounds": 1},
                                              "trigger": True}).json()
        token = ci["trigger_token"]
        assert token and ci["cron"] is None and ci["next_at"] is None
        url = f"{service.url}/v1/triggers/{ci['id']}"

        def fire(i: int) -> httpx.Response:
            return httpx.post(url, json={"text": f"FAILED test_{i}"}, headers={"Authorization": f"Bearer {token}"},
                              timeout=30)

        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(fire, range(10)))
        started = [a.json() for a in answers if a.status_code == 201]
        refused = [a for a in answers if a.status_code != 201]
        tenant_token = httpx.post(url, headers={"Authorization": f"Bearer {TOKENS['acme']}"}, timeout=30)
        assert acme.delete(f"/v1/schedules/{ci['id']}/trigger").status_code == 200
        revoked = httpx.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        triggered = [wait_status(acme, s["run"], ENDED, timeout=180) for s in started]

    assert run["status"] == "failed" and "per-run budget" in run["error"] and "$0.70" in run["error"], run
    assert run["cost_usd"] <= 0.70 and run["fired_by"]["by"] == "schedule", run
    assert run["fired_by"]["schedule"] == nightly["id"] and run["fired_by"]["tick"].endswith(":00.000Z")
    assert len(started) == 3 and len({s["run"] for s in started}) == 3, started
    assert [a.status_code for a in refused] == [429] * 7, [a.text for a in refused]
    assert all(a.headers["retry-after"] == "60" and "trigger_per_minute" in a.json()["error"] for a in refused)
    assert all(t["ask"].startswith("CI 挂了, 修一下\n\nFAILED test_") for t in triggered), triggered
    assert all(t["fired_by"]["by"] == "trigger" and t["fired_by"]["schedule"] == ci["id"] for t in triggered)
    assert tenant_token.status_code == 401 and "fires no trigger" in tenant_token.json()["error"]
    assert revoked.status_code == 401 and "revoked" in revoked.json()["error"]


"""A poison run fails alone: what a run writes into its own outbox never becomes the service's keywords, field names
or control flow, never stops the scheduler, and never keeps the service from starting again. Attacked from inside
a run (its worker's Bash, through the real CLI, local bubblewrap backend)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from _service_helpers import Service, end_leftover_runs, sse, wait_for, wait_status
from _hostile import DONE, ENDED, hostile_deployment, worker_rules
from flower.testing import ScriptedModel

pytestmark = pytest.mark.cli

# audit lines whose payload names the log's own fields, an event that claims another number, an unknown kind and
# audit kind, a payload that is not an object, exit.json-shaped garbage in the middle
POISON = [
    {"kind": "audit", "text": "deny", "payload": {"audit": "deny", "source": "wire", "event": "forged", "level": "x",
                                                  "timestamp": 1, "logger": "root", "tenant": "beta", "run": "other",
                                                  "tool": "Write", "reason": "planted"}},
    {"kind": "audit", "text": "\u001b]52;c;cHduZWQ=\u0007", "payload": {"source": "x"}},
    {"kind": "audit", "text": "spill", "payload": ["not", "an", "object"]},
    {"kind": "Evil Kind!", "seq": 999999, "text": "claims another number"},
    {"kind": "step", "text": {"not": "a string"}},
]


def _script(outbox: str) -> str:
    lines = "\n".join(f"printf '%s\\n' {json.dumps(json.dumps(p))} >> {outbox}/events.jsonl" for p in POISON)
    return f"set +e\n{lines}\necho {DONE}\nsleep 300"


def _benign(ask: str) -> list:
    return worker_rules(ask, f"echo hello > hello.txt; echo {DONE}")


def test_a_poisoned_outbox_is_data_the_scheduler_goes_on_and_the_service_starts_again(
        tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    rules = worker_rules("下毒", _script("../outbox")) + _benign("beta 的活") + _benign("之后的活")
    with ScriptedModel(rules) as model:
        for path in dep.creds.values():
            path.write_text("".join(f"{k}={v}\n" for k, v in model.env.items()))
        service = Service(dep).start(timeout=120)
        services.append(service)
        acme, beta = service.client("acme"), service.client("beta")
        a = acme.post("/v1/runs", json={"ask": "下毒", "options": {"rounds": 1, "timeout_s": 600}}).json()["id"]
        b = beta.post("/v1/runs", json={"ask": "beta 的活", "options": {"rounds": 1}}).json()["id"]

        def forged() -> list[dict]:
            return [x for x in service.lines() if x.get("event") == "audit.deny" and x.get("reason") == "planted"]

        logged = wait_for(forged, timeout=180, what="the run's planted audit line in the service log")
        assert wait_status(beta, b, ENDED, timeout=180)["status"] == "succeeded", "the other tenant's run went on"
        assert beta.get("/healthz").status_code == 200
        line = logged[0]
        assert (line["tenant"], line["run"], line["source"], line["logger"]) == ("acme", a, "run", "flower.audit"), line
        assert line["level"] == "warning" and line["tool"] == "Write" and "timestamp" in line
        odd = [x for x in service.lines() if x.get("event") == "audit.unrecognised" and x.get("run") == a]
        assert odd and "\u001b" not in json.dumps(odd[0], ensure_ascii=False).replace("\\u001b", "")
        assert not [x for x in service.lines() if x.get("event") in ("scheduler.follow_failed", "run.poisoned")]
        assert acme.get(f"/v1/runs/{a}").json()["status"] == "running"

        # the service dies, and so does the run's sandbox: the new one starts over the poisoned folder
        service.stop(signal.SIGKILL)
        end_leftover_runs(dep.data / "runs")
        again = Service(dep, "again").start(timeout=60)
        services.append(again)
        acme = again.client("acme")
        ra = wait_status(acme, a, ENDED, timeout=120)
        # stopped while no service watched (the backend's stop wrote "killed"): a loss, resumed over the poisoned
        # folder in a new sandbox — the new service reads the poison as data again and goes on
        assert [x["cause"] for x in ra["losses"]] == ["killed"] and ra["sandboxes"] == 2, ra
        c = acme.post("/v1/runs", json={"ask": "之后的活", "options": {"rounds": 1}}).json()["id"]
        assert wait_status(acme, c, ENDED, timeout=180)["status"] == "succeeded", "the tenant's quota came back"
        stream = sse(acme, a, timeout=30)  # the whole file, replayed, then its end
    assert stream[-1]["event"] == "end"
    events = stream[:-1]
    numbers = [int(e["id"]) for e in events]
    assert numbers == sorted(numbers) and all(e["data"]["seq"] == int(e["id"]) for e in events), "our numbers only"
    claimed = [e for e in events if e["data"].get("text") == "claims another number"]
    assert claimed and claimed[0]["event"] == "unparsed" and claimed[0]["data"]["seq"] != 999999
    assert not any(e["data"].get("kind") == "Evil Kind!" for e in events)

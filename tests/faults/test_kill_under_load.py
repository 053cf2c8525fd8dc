"""Item 3: ``kill -9`` of the service while 20 runs are in flight (some running, some starting, some queued),
then a restart: every run is re-attached, queued again or finished from its exit file, none is lost, no row is
left in ``starting``, and every SSE stream — cut by the kill, resumed with Last-Event-ID — has each event once."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from _faults import figures, lines_between
from _service_helpers import TOKENS, Deployment, Service, serve, wait_for
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ASK, BRIEF, CLARIFIER

pytestmark = pytest.mark.cli

RUNS = 20
TERMINAL = {"succeeded", "failed", "aborted", "killed", "cancelled"}


class Stream(threading.Thread):
    """One SSE reader: every event it got, until `end` or until the connection is cut."""

    def __init__(self, url: str, tenant: str, run_id: str, last: str | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.tenant, self.run_id, self.last = url, tenant, run_id, last
        self.events: list[dict[str, Any]] = []
        self.ended: dict[str, Any] | None = None
        self.cut = False

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {TOKENS[self.tenant]}"}
        if self.last is not None:
            headers["Last-Event-ID"] = self.last
        cur: dict[str, Any] = {}
        try:
            with httpx.stream("GET", f"{self.url}/v1/runs/{self.run_id}/events", headers=headers,
                              timeout=httpx.Timeout(30, read=300)) as r:
                if r.status_code == 429:  # the tenant's streams at their cap (a killed replica's slots, until its
                    self.cut = True       # lease runs out): a client comes back later, as one that was cut
                    return
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    if not line:
                        if cur.get("event") == "end":
                            self.ended = cur["data"]
                            return
                        if cur.get("id"):  # an event (a keep-alive is a comment: no id, no data)
                            self.events.append(cur)
                        cur = {}
                    elif not line.startswith(":"):
                        key, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if value or key != "data":
                            cur[key] = json.loads(value) if key == "data" else value
        except (httpx.TransportError, httpx.RemoteProtocolError):
            self.cut = True


def test_kill_9_with_20_runs_in_flight_loses_no_run_and_no_event(tmp_path: Path, services: list[Service]):
    deployment = Deployment(tmp_path, quota=RUNS // 2, max_running=RUNS)
    tags = {f"负载-{i:02d}-": ("acme" if i % 2 else "beta") for i in range(RUNS)}
    rules = [r for tag in tags for r in (
        Rule(tool(ASK, {"question": f"{tag} 用什么语言?"}), system=CLARIFIER, prompt=tag),
        Rule(say(BRIEF), system=CLARIFIER, prompt=tag, result="Python"))]
    with ScriptedModel(rules) as model:
        first = serve(deployment, services, model, "first", timeout=180)
        clients = {t: first.client(t) for t in TOKENS}
        runs: dict[str, str] = {}
        for tag, tenant in tags.items():
            r = clients[tenant].post("/v1/runs", json={"ask": f"{tag} 做个小工具", "options": {"clarify_only": True}})
            assert r.status_code == 201, r.text
            runs[r.json()["id"]] = tenant
        before = [Stream(first.url, t, i) for i, t in runs.items()]
        for s in before:
            s.start()

        def statuses(svc: Service) -> dict[str, str]:
            out: dict[str, str] = {}
            for t in TOKENS:
                with svc.client(t) as c:
                    out.update({r["id"]: r["status"] for r in c.get("/v1/runs").json()["runs"]})
            return out

        def seen(svc: Service) -> dict[str, int]:
            out: dict[str, int] = {}
            for t in TOKENS:
                with svc.client(t) as c:
                    out.update({r["id"]: r["events"] for r in c.get("/v1/runs").json()["runs"]})
            return out

        # kill when the runs are at every stage: some with events streamed, some starting, some queued
        wait_for(lambda: sum(s == "running" for s in statuses(first).values()) >= RUNS // 2
                 and sum(n > 0 for n in seen(first).values()) >= RUNS // 4, 240, every=0.3,
                 what="half the runs running, a quarter with events")
        at_kill = statuses(first)
        t_kill = time.time()
        first.stop(signal.SIGKILL)  # a crash under load: nothing is cleaned up, streams are cut
        for s in before:
            s.join(30)
        assert all(s.cut or s.ended for s in before)

        second = Service(deployment, "second").start(timeout=180)
        services.append(second)
        t_up = time.time()
        after = [Stream(second.url, s.tenant, s.run_id, s.events[-1]["id"] if s.events else None) for s in before]
        for s in after:
            s.start()
        answered: set[str] = set()

        def answer_all() -> bool:
            current = statuses(second)
            for run_id, tenant in runs.items():
                if current[run_id] != "running" or run_id in answered:
                    continue
                with second.client(tenant) as c:
                    for q in c.get(f"/v1/runs/{run_id}/questions").json()["questions"]:
                        c.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "Python"})
                        answered.add(run_id)
            return all(current[i] in TERMINAL for i in runs)

        wait_for(answer_all, 300, every=0.5, what="every run to end")
        t_done = time.time()
        for s in after:
            s.join(60)
        final = statuses(second)
    recovered = [x for x in second.lines() if x.get("event") in ("run.reattached", "run.requeued",
                                                                  "run.ended_while_away")]
    kinds = {k: sum(1 for x in recovered if x["event"] == k) for k in ("run.reattached", "run.requeued",
                                                                        "run.ended_while_away")}
    active_at_kill = {i for i, s in at_kill.items() if s in ("starting", "running")}
    assert {x["run"] for x in recovered} >= active_at_kill, "every run active at the kill is picked up again"
    assert final == {i: "succeeded" for i in runs}, final
    assert not [i for i, s in final.items() if s == "starting"]

    lost = duplicated = 0
    for b, a in zip(before, after):
        seqs = [int(e["id"]) for e in b.events + a.events]
        lines = (deployment.data / "runs" / b.run_id / "outbox" / "events.jsonl").read_text().splitlines()
        expected = list(range(1, len(lines) + 1))
        duplicated += len(seqs) - len(set(seqs))
        lost += len(set(expected) - set(seqs))
        assert seqs == expected, (b.run_id, seqs, len(lines))
        assert [json.loads(line) for line in lines] == [{k: v for k, v in e["data"].items() if k != "seq"}
                                                          for e in b.events + a.events]
        assert a.ended and a.ended["status"] == "succeeded"
    down = lines_between(second, t_up, t_done)
    figures("kill_9_under_load", runs_in_flight=len(runs),
            at_kill={s: sum(1 for v in at_kill.values() if v == s) for s in set(at_kill.values())},
            runs_lost=sum(1 for s in final.values() if s != "succeeded"), reattached=kinds["run.reattached"],
            requeued=kinds["run.requeued"], finished_from_exit_file=kinds["run.ended_while_away"],
            events_total=sum(len(b.events) + len(a.events) for b, a in zip(before, after)),
            events_before_kill=sum(len(b.events) for b in before), events_lost=lost, events_duplicated=duplicated,
            restart_to_listening_s=round(t_up - t_kill, 1), restart_to_all_done_s=round(t_done - t_kill, 1),
            log_lines_per_min_after_restart=round(len(down) / max((t_done - t_up) / 60, 1e-9), 1))

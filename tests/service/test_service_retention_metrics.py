"""Retention and metrics on one service, in this process so its clock can be moved on by days: the
app as ``create_app`` makes it, served by uvicorn on 127.0.0.1, real runs on the LocalBackend driven by the
scripted model.

Retention: DELETE removes an ended run's folder (and, asked to, its branch) and keeps a tombstone; a
cancelled run's empty branch goes by itself; once ``retain_days`` has passed the sweep removes the
files of the runs that ended before — and a live run beside them keeps everything. Metrics: /metrics
parses with prometheus-client's parser and its numbers are the runs this test made."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from _service_helpers import (SCRAPE, TOKENS, Deployment, end_leftover_runs, git, run_status, scrape_config, wait_for,
                              wait_question, wait_status)
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ASK, BRIEF, CLARIFIER
from service.app import create_app
from service.clock import SystemClock
from service.config import load_config

pytestmark = pytest.mark.cli
DAY = 86400.0


class Clock(SystemClock):
    """The machine's clock, its wall time moved on by ``offset`` (every part of the service reads it)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return super().now() + self.offset


class InProcess:
    """uvicorn serving ``app`` on an ephemeral loopback port, in a thread of this process."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, lifespan="on"))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        wait_for(lambda: self.server.started, 60, what="uvicorn to start")
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *_: Any) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def clarify(tag: str) -> list[Rule]:
    return [Rule(tool(ASK, {"question": f"{tag} 用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER,
                 prompt=tag),
            Rule(say(BRIEF), system=CLARIFIER, prompt=tag, result="Python")]


def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = httpx.get(f"{url}/metrics", headers=SCRAPE)
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    dep = Deployment(tmp_path / "keep", quota=4, extra_config="retain_days = 1\n" + scrape_config(tmp_path))
    yield dep
    end_leftover_runs(dep.data / "runs")


def test_delete_retention_and_metrics_leave_a_live_run_alone(deployment: Deployment) -> None:
    rules = [r for tag in ("旧活一", "旧活二", "进行中") for r in clarify(tag)]
    rules.append(Rule(tool(ASK, {"question": "取消我吧"}), system=CLARIFIER, prompt="会被取消"))
    clock = Clock()
    with ScriptedModel(rules) as model:
        deployment.set_credentials(model.env)
        app = create_app(load_config(deployment.config), clock=clock)
        with InProcess(app) as url:
            acme = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS['acme']}"}, timeout=60)
            runs_root, repo = deployment.data / "runs", deployment.repos["acme"]

            def submit(ask: str) -> str:
                r = acme.post("/v1/runs", json={"ask": ask, "options": {"clarify_only": True}})
                assert r.status_code == 201, r.text
                return str(r.json()["id"])

            def finish(run_id: str) -> dict[str, Any]:
                q = wait_question(acme, run_id)
                assert acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "1"}).json()
                return wait_status(acme, run_id, ("succeeded", "failed", "aborted", "killed"))

            old1, old2, live, doomed = submit("旧活一"), submit("旧活二"), submit("进行中"), submit("会被取消")
            assert finish(old1)["status"] == "succeeded" and finish(old2)["status"] == "succeeded"
            live_q = wait_question(acme, live)
            wait_question(acme, doomed)
            r = acme.post(f"/v1/runs/{doomed}/cancel")
            assert r.status_code == 200 and r.json()["status"] == "cancelled"

            # a cancelled run that handed nothing back leaves no branch; ended runs report their disk
            assert f"flower/{doomed}" not in git(repo, "branch", "--list") and r.json()["branch"] is None
            assert f"flower/{old1}" in git(repo, "branch", "--list")
            assert run_status(acme, old1)["disk_bytes"] > 0

            # metrics: exactly the runs above
            with acme.stream("GET", f"/v1/runs/{live}/events") as stream:
                lines = stream.iter_lines()  # kept: a dropped line iterator closes its stream
                next(lines)
                m = metrics(url)
            assert m[("flower_sse_streams", (("tenant", "acme"),))] == 1
            runs = {labels: v for (name, labels), v in m.items() if name == "flower_runs"}
            assert runs == {(("status", "cancelled"), ("tenant", "acme")): 1,
                            (("status", "running"), ("tenant", "acme")): 1,
                            (("status", "succeeded"), ("tenant", "acme")): 2}, runs
            assert m[("flower_run_starts_total", (("tenant", "acme"),))] == 4
            assert m[("flower_run_queue_wait_seconds_count", (("tenant", "acme"),))] == 4
            assert m[("flower_run_start_seconds_count", (("warm", "false"),))] == 4  # each reached the model
            assert m[("flower_run_duration_seconds_count", (("status", "succeeded"), ("tenant", "acme")))] == 2
            assert m[("flower_run_duration_seconds_count", (("status", "cancelled"), ("tenant", "acme")))] == 1
            assert not [k for k in m if k[0] == "flower_run_failures_total"], "no run failed"
            assert metrics(url)[("flower_sse_streams", (("tenant", "acme"),))] == 0

            # DELETE: not a live run; an ended one loses its folder (and its branch, asked to), keeps its row
            r = acme.delete(f"/v1/runs/{live}")
            assert r.status_code == 409 and "only an ended run" in r.json()["error"]
            assert (runs_root / live).is_dir()
            r = acme.delete(f"/v1/runs/{old1}", params={"branch": True})
            assert r.status_code == 200, r.text
            assert r.json()["deleted"] and r.json()["status"] == "succeeded" and r.json()["branch"] is None
            assert not (runs_root / old1).exists() and f"flower/{old1}" not in git(repo, "branch", "--list")
            assert acme.get(f"/v1/runs/{old1}/events").status_code == 410
            assert old1 in [x["id"] for x in acme.get("/v1/runs").json()["runs"]]
            assert old1 not in [x["id"] for x in acme.get("/v1/runs", params={"deleted": False}).json()["runs"]]
            assert httpx.delete(f"{url}/v1/runs/{old2}",
                                headers={"Authorization": f"Bearer {TOKENS['beta']}"}).status_code == 404

            # retain_days: two days on, the sweep takes what ended before the cutoff — only that
            assert (runs_root / old2).is_dir()
            clock.offset = 2 * DAY
            wait_for(lambda: not (runs_root / old2).exists(), 60, what="the retention sweep")
            assert run_status(acme, old2)["deleted"] and f"flower/{old2}" in git(repo, "branch", "--list")
            assert (runs_root / live).is_dir() and (runs_root / live / "outbox" / "events.jsonl").is_file()
            assert run_status(acme, live)["status"] == "running" and run_status(acme, live)["deleted"] is None
            assert finish(live)["status"] == "succeeded", "the live run went on to the end untouched"
            assert live_q["id"]
    assert model.unmatched == []


def test_a_run_past_its_disk_bound_is_stopped_and_says_why(tmp_path: Path) -> None:
    # a waiting run's folder: ~1 MB
    dep = Deployment(tmp_path / "disk", extra_config="max_run_disk_mb = 0.25\n" + scrape_config(tmp_path))
    try:
        with ScriptedModel([Rule(tool(ASK, {"question": "等着"}), system=CLARIFIER, repeat=True)]) as model:
            dep.set_credentials(model.env)
            with InProcess(create_app(load_config(dep.config))) as url:
                acme = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS['acme']}"}, timeout=60)
                run_id = acme.post("/v1/runs", json={"ask": "占地方", "options": {"clarify_only": True}}).json()["id"]
                final = wait_status(acme, run_id, ("succeeded", "failed", "aborted", "killed", "cancelled"))
                assert final["status"] == "failed" and "max_run_disk_mb" in final["error"], final
                assert final["disk_bytes"] > 256 * 1024
                assert metrics(url)[("flower_run_failures_total", (("reason", "disk"), ("tenant", "acme")))] == 1
    finally:
        end_leftover_runs(dep.data / "runs")

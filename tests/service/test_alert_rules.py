"""The chart's alert rules and Grafana dashboard (helm/files/) against a live service: Debian's Prometheus server
on 127.0.0.1 scrapes the real service every second and evaluates the rules file itself. Every expression
evaluates, every metric it names is in the service's scrape, the alerts say what the scrape says (nothing fires
on a healthy service), and a run that fails makes the failure-rate alert's expression hold for its tenant."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from _service_helpers import (SCRAPE, SCRAPE_TOKEN, Deployment, Service, end_leftover_runs, scrape_config, wait_for,
                              wait_status)
from flower.testing import Rule, ScriptedModel, tool
from sandbox.testing import ASK, CLARIFIER

pytestmark = pytest.mark.cli

FILES = Path(__file__).resolve().parents[2] / "helm" / "files"
ENDED = ("succeeded", "failed", "aborted", "killed", "cancelled")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    """``prometheus`` scraping one target every second with the scrape token (as the chart's ServiceMonitor does),
    with ``rules`` loaded; ``query`` is its HTTP API."""

    def __init__(self, root: Path, target: str, rules: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            if os.environ.get("FLOWER_REQUIRE_PROMETHEUS") == "1":
                pytest.fail("FLOWER_REQUIRE_PROMETHEUS=1 but the prometheus server is not installed "
                            "(apt-get install prometheus)")
            pytest.skip("no prometheus server (apt-get install prometheus)")
        config = root / "prometheus.yml"
        token = root / "scrape.token"
        token.write_text(SCRAPE_TOKEN)
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "flower", "static_configs": [{"targets": [target]}],
                                "authorization": {"type": "Bearer", "credentials_file": str(token)}}]}))
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.log = (root / "prometheus.log").open("wb")
        self.proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
                                      f"--web.listen-address={self.url.removeprefix('http://')}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert answer["status"] == "success", (expr, answer)
        return list(answer["data"]["result"])

    def ready(self) -> bool:
        assert self.proc.poll() is None, "prometheus exited (see its log in the test's folder)"
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Service, Prometheus]]:
    """A service whose runs fail past a quarter megabyte of disk, and a Prometheus watching it."""
    dep = Deployment(tmp_path / "svc", extra_config="max_run_disk_mb = 0.25\n" + scrape_config(tmp_path))
    with ScriptedModel([Rule(tool(ASK, {"question": "等着"}), system=CLARIFIER, repeat=True)]) as model:
        dep.set_credentials(model.env)
        service = Service(dep).start()
        prometheus = Prometheus(tmp_path, service.url.removeprefix("http://"), FILES / "alerts.yaml")
        try:
            wait_for(prometheus.ready, 60, every=0.2, what="prometheus to be ready")
            wait_for(lambda: prometheus.query("flower_backend_up"), 60, every=0.2, what="the first scrape")
            yield service, prometheus
        finally:
            prometheus.stop()
            service.stop()
            end_leftover_runs(dep.data / "runs")


def _alerts() -> dict[str, str]:
    groups = yaml.safe_load((FILES / "alerts.yaml").read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups for r in g["rules"] if "alert" in r}


def _dashboard_exprs() -> list[str]:
    panels = json.loads((FILES / "dashboard.json").read_text())["panels"]
    return [t["expr"].replace("$tenant", ".*") for p in panels for t in p["targets"]]


def _scraped(service: Service) -> set[str]:
    text = httpx.get(f"{service.url}/metrics", headers=SCRAPE).text
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")} | {
        m for m in re.findall(r"^# TYPE (\S+)", text, re.M)}


def test_the_alert_rules_and_dashboard_hold_against_a_live_service_and_a_failing_run_fires(
        watched: tuple[Service, Prometheus]) -> None:
    service, prometheus = watched
    alerts, panels = _alerts(), _dashboard_exprs()
    assert len(alerts) >= 8 and len(panels) >= 14

    scraped = _scraped(service)
    recorded = {r["record"] for g in yaml.safe_load((FILES / "alerts.yaml").read_text())["groups"]
                for r in g["rules"] if "record" in r}
    for expr in [*alerts.values(), *panels]:
        named = set(re.findall(r"\bflower[:_][a-z0-9_:]+", expr)) - recorded
        names = {re.sub(r"_(bucket|sum|count)$", "", n) for n in named}
        missing = {n for n in names if n not in scraped and n.removesuffix("_total") not in scraped}
        assert not missing, f"{expr!r} names what the service does not export: {missing}"
        prometheus.query(expr)  # it parses and evaluates

    # a healthy service: only what its scrape says may fire
    free = prometheus.query("max(flower_data_free_bytes)")[0]["value"][1]
    floor = prometheus.query("max(flower_data_free_floor_bytes)")[0]["value"][1]
    filling = float(free) < 2 * float(floor)
    fired = {name for name, expr in alerts.items() if prometheus.query(expr)}
    assert fired == ({"FlowerDiskFillingUp"} if filling else set()), fired

    acme = service.client("acme")
    run_id = acme.post("/v1/runs", json={"ask": "占地方", "options": {"clarify_only": True}}).json()["id"]
    final = wait_status(acme, run_id, ENDED)
    assert final["status"] == "failed" and "max_run_disk_mb" in final["error"], final

    failing = wait_for(lambda: prometheus.query(alerts["FlowerRunsFailing"]), 60, every=0.2,
                       what="the failure-rate expression to hold")
    assert [(r["metric"].get("tenant"), float(r["value"][1])) for r in failing] == [("acme", 1.0)], failing
    pending = wait_for(lambda: prometheus.query('ALERTS{alertname="FlowerRunsFailing"}'), 60, every=0.2,
                       what="Prometheus to evaluate the rule itself")
    assert pending[0]["metric"]["alertstate"] == "pending" and pending[0]["metric"]["tenant"] == "acme", pending
    assert not prometheus.query(alerts["FlowerBudgetStops"]), "a disk stop is no budget stop"

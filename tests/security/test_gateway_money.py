"""The tenant's money and its provider, attacked from inside a run (its worker's Bash talks to its own gateway
socket with its own token): an answer is metered from the upstream's side when the run hangs up before reading it,
fifty concurrent calls pass a budget by at most one call — a hundred through two gateway processes on one
PostgreSQL likewise — and only allowed headers and server-side tools reach the tenant's provider."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest

from _service_helpers import ROOT, Deployment, Service, wait_for, wait_status
from _hostile import DONE, ENDED, hostile_deployment, worker_rules
from flower.testing import Rule, ScriptedModel, say
from service.budgets import day_of
from service.gateway import new_token
from service.registry import Registry
from service.tenants import TenantError, Tenants

pytestmark = pytest.mark.cli

KEYS = {name: f"sk-ant-{name}-money-{uuid.uuid4().hex}" for name in ("acme", "beta")}
PRICES = 'prices = { "flower-test-model" = [2.0, 10.0] }\n'  # USD per million tokens: input, output
MODEL = {"ANTHROPIC_MODEL": "flower-test-model", "ANTHROPIC_SMALL_FAST_MODEL": "flower-test-model"}

# The attack's side: HTTP/1.1 by hand on the run's gateway socket (the bridge's port when there is none).
CALLER = r'''
import json, os, socket, sys, threading, time
def connect():
    path = os.environ.get("FLOWER_GATEWAY_SOCKET")
    if path:  # through a folder fd, as the bridge does: the path may pass a socket path's 108 bytes
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        s = socket.socket(socket.AF_UNIX)
        s.connect(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
        os.close(fd)
        return s
    host, port = os.environ["ANTHROPIC_BASE_URL"].split("//", 1)[1].rstrip("/").rsplit(":", 1)
    return socket.create_connection((host, int(port)))
def call(body, headers=(), read=True):
    data = json.dumps(body).encode()
    head = ["POST /v1/messages HTTP/1.1", "host: gateway", "content-type: application/json", "connection: close",
            f"content-length: {len(data)}", "anthropic-version: 2023-06-01",
            "x-api-key: " + os.environ["ANTHROPIC_API_KEY"], *headers]
    s = connect()
    s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    if not read:
        s.close()  # hang up before a byte of the answer is read
        return 0, ""
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    s.close()
    status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/") else 0
    return status, got.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
def ask(text, **extra):
    return {"model": "flower-test-model", "max_tokens": 500, "messages": [{"role": "user", "content": text}], **extra}
'''


def bash(python: str) -> str:
    return f"""set +e
"$(command -v python3 || command -v python)" - <<'PY'
{CALLER}
{python}
PY
echo {DONE}"""


def start(dep: Deployment, services: list[Service], model: ScriptedModel, **env: str) -> Service:
    """Each tenant's credentials: its own key, the scripted model as its upstream, quiet-CLI settings."""
    for name, path in dep.creds.items():
        values = {**model.env, "ANTHROPIC_API_KEY": KEYS[name], **MODEL, **env}
        values.pop("CLAUDE_CONFIG_DIR")
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    service = Service(dep).start(timeout=120)
    services.append(service)
    return service


def submit(service: Service, tenant: str, ask: str) -> str:
    r = service.client(tenant).post("/v1/runs", json={"ask": ask, "options": {"rounds": 1, "timeout_s": 60}})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def upstream_cost(model: ScriptedModel, tenant: str) -> tuple[int, int, float]:
    """Input and output tokens and USD of every answer the upstream gave with ``tenant``'s key."""
    used = [r.usage for r in model.requests if r.usage and r.headers.get("x-api-key") == KEYS[tenant]]
    tokens_in = sum(u["input_tokens"] for u in used)
    tokens_out = sum(u["output_tokens"] for u in used)
    return tokens_in, tokens_out, (tokens_in * 2.0 + tokens_out * 10.0) / 1e6


def probe_lines(model: ScriptedModel, ask: str) -> list[str]:
    out = next(r["text"] for req in model.conversation if f"WORKER-TASK {ask}" in req.prompt
               for r in req.results if DONE in r["text"])
    return [line for line in out.splitlines() if line.startswith("PROBE")]


# -- hang-ups: metered from the upstream's side ---------------------------------------------------------------
HANGUPS = """
for i in range(6):  # three plain answers, three streamed; each socket closed right after the request went
    call(ask(f"HANGUP {i}", stream=i % 2 == 1), read=False)
print("PROBE hung up 6")
"""


def test_a_run_that_hangs_up_before_reading_is_metered_exactly_what_the_upstream_reported(
        tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    dep.config.write_text(dep.config.read_text() + PRICES)
    hangup = Rule(say("答案没人读", usage={"input_tokens": 3_000, "output_tokens": 700}), prompt="HANGUP", repeat=True)
    with ScriptedModel([hangup, *worker_rules("挂断", bash(HANGUPS))]) as model:
        service = start(dep, services, model)
        run = wait_status(service.client("acme"), submit(service, "acme", "挂断"), ENDED, timeout=300)
        day = service.client("acme").get("/v1/usage").json()
        probe = probe_lines(model, "挂断")
    hung = [r for r in model.requests if "HANGUP" in r.prompt]
    tokens_in, tokens_out, cost = upstream_cost(model, "acme")
    print("probe:", probe, f"upstream: {tokens_in} in, {tokens_out} out, ${cost:.6f}; metered: {run['usage']}, "
          f"${run['cost_usd']:.6f}")
    assert run["status"] == "succeeded" and "PROBE hung up 6" in probe, (run, probe)
    assert len(hung) == 6 and all(r.usage for r in hung), "every hung-up request reached the upstream and was answered"
    assert (run["usage"]["input_tokens"], run["usage"]["output_tokens"]) == (tokens_in, tokens_out), run["usage"]
    assert run["cost_usd"] == pytest.approx(cost, abs=1e-9) and day["cost_usd"] == pytest.approx(cost, abs=1e-9)


# -- budgets: fifty calls at once pass a budget by at most one call -------------------------------------------
FLOOD = """
stopped = []
def caller(i):
    for _ in range(400):  # a call the budget holds back for calls in flight (429) is retried; a 403 is final
        status, text = call(ask(f"BUDGET {i} " + "x" * 6000))
        if status == 403:
            stopped.append(text)
            return
        if status == 200:
            continue
        time.sleep(0.02)
threads = [threading.Thread(target=caller, args=(i,)) for i in range(50)]
for t in threads: t.start()
for t in threads: t.join()
print("PROBE stopped", len(stopped))
"""
CALL = {"input_tokens": 2_500, "output_tokens": 500}  # $0.005 + $0.005 at 2/10 per million: each call is $0.01
CALL_USD = 0.01


def test_fifty_concurrent_calls_pass_a_run_and_a_day_budget_by_at_most_one_call(
        tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    dep.config.write_text(dep.config.read_text() + PRICES)
    dep.write_tenants(acme={"budget_usd.run": 0.10}, beta={"budget_usd.day": 0.10})
    # each answer waits a little, so the calls truly overlap in the gateway
    flood = Rule(say("又花一笔", usage=CALL, delay=0.2), prompt="BUDGET", repeat=True)
    with ScriptedModel([flood, *worker_rules("花光预算", bash(FLOOD)), *worker_rules("花光日预算", bash(FLOOD))]) as model:
        service = start(dep, services, model)
        per_run, per_day = submit(service, "acme", "花光预算"), submit(service, "beta", "花光日预算")
        run = wait_status(service.client("acme"), per_run, ENDED, timeout=300)
        day_run = wait_status(service.client("beta"), per_day, ENDED, timeout=300)
        day = service.client("beta").get("/v1/usage").json()
    over_run, over_day = run["cost_usd"] - 0.10, day["cost_usd"] - 0.10
    print(f"per-run budget $0.10: spent ${run['cost_usd']:.4f}, overshoot ${over_run:.4f}; "
          f"daily budget $0.10: spent ${day['cost_usd']:.4f}, overshoot ${over_day:.4f}; one call ${CALL_USD}")
    assert run["status"] == "failed" and "per-run budget" in run["error"], run
    assert day_run["status"] == "failed" and "daily budget" in day_run["error"], day_run
    for tenant, spent in (("acme", run["cost_usd"]), ("beta", day["cost_usd"])):
        assert spent == pytest.approx(upstream_cost(model, tenant)[2], abs=1e-9)  # what the upstream reported
    assert 0 <= over_run <= CALL_USD + 1e-9, f"the per-run budget was passed by ${over_run:.4f}"
    assert 0 <= over_day <= CALL_USD + 1e-9, f"the daily budget was passed by ${over_day:.4f}"


# -- what reaches the provider: allowed headers and, with open egress only, listed server tools ---------------
PROVIDER = """
status, _ = call(ask("HEADERS-PROBE"), headers=[
    "cookie: session=stolen", "forwarded: for=198.51.100.7", "x-forwarded-for: 198.51.100.7",
    "anthropic-beta: files-api-2025-04-14,claude-code-20250219", "x-tenant-route: from-the-run"])
print("PROBE headers", status)
web = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}]
mcp = [{"type": "url", "url": "http://127.0.0.1:9/mcp", "name": "elsewhere"}]
for name, extra in (("web_search", {"tools": web}), ("mcp_servers", {"mcp_servers": mcp})):
    status, text = call(ask(f"TOOLS-PROBE {name}", **extra))
    kind = json.loads(text)["error"]["type"] if status != 200 else "-"
    message = json.loads(text)["error"]["message"] if status != 200 else "-"
    print("PROBE", name, status, kind, message)
"""


def test_only_allowed_headers_and_server_tools_reach_the_tenants_provider(tmp_path: Path,
                                                                         services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    dep.config.write_text(dep.config.read_text() + PRICES)
    dep.write_tenants(beta={"egress": "open", "server_tools": ["web_search", "mcp_servers"]})
    probes = [Rule(say("好"), prompt="HEADERS-PROBE", repeat=True), Rule(say("搜到了"), prompt="TOOLS-PROBE", repeat=True)]
    with ScriptedModel([*probes, *worker_rules("关着的门", bash(PROVIDER)),
                        *worker_rules("开着的门", bash(PROVIDER))]) as model:
        service = start(dep, services, model, ANTHROPIC_CUSTOM_HEADERS="x-tenant-route: tenant-value")
        closed, opened = submit(service, "acme", "关着的门"), submit(service, "beta", "开着的门")
        rc = wait_status(service.client("acme"), closed, ENDED, timeout=300)
        ro = wait_status(service.client("beta"), opened, ENDED, timeout=300)
        out_closed, out_open = probe_lines(model, "关着的门"), probe_lines(model, "开着的门")
    print("closed:", out_closed, "\nopen:", out_open)
    assert rc["status"] == "succeeded" and ro["status"] == "succeeded", (rc, ro)  # the CLI's own headers still work

    headers = next(r for r in model.requests if "HEADERS-PROBE" in r.prompt
                   and r.headers.get("x-api-key") == KEYS["acme"]).header_list
    names = [name for name, _ in headers]
    assert "PROBE headers 200" in out_closed, out_closed
    assert not {"cookie", "forwarded", "x-forwarded-for"} & set(names), headers
    assert [v for k, v in headers if k == "anthropic-beta"] == ["claude-code-20250219"], headers
    assert [v for k, v in headers if k == "x-tenant-route"] == ["tenant-value"], headers  # once, the tenant's
    cli = [r for r in model.conversation if r.headers.get("x-api-key") == KEYS["acme"] and "PROBE" not in r.prompt]
    assert cli and all(r.headers.get("x-tenant-route") == "tenant-value" for r in cli)

    for name in ("web_search", "mcp_servers"):
        refused = next(line for line in out_closed if line.startswith(f"PROBE {name} "))
        assert refused.startswith(f"PROBE {name} 403 permission_error flower gateway: server-side tool(s) {name} "
                                  "are not forwarded"), refused
        assert "`server_tools`" in refused and 'egress = "open"' in refused, refused
        assert any(line.startswith(f"PROBE {name} 200") for line in out_open), out_open
    forwarded = [r for r in model.requests if "TOOLS-PROBE" in r.prompt]
    assert {r.headers.get("x-api-key") for r in forwarded} == {KEYS["beta"]}, "nothing of acme's was forwarded"
    assert len(forwarded) == 2 and forwarded[0].body["tools"][0]["type"] == "web_search_20250305"
    assert forwarded[1].body["mcp_servers"][0]["name"] == "elsewhere"


def test_a_tenants_file_naming_an_unknown_server_tool_is_refused_with_a_sentence(tmp_path: Path) -> None:
    dep = Deployment(tmp_path / "dep")
    dep.write_tenants(acme={"server_tools": ["web_search", "shell_anywhere"]})
    with pytest.raises(TenantError) as e:
        Tenants(dep.root / "tenants.toml")
    assert re.search(r"tenant acme in .* lists unknown server tool\(s\) shell_anywhere in `server_tools`; use only "
                     r"web_search, web_fetch", str(e.value)), e.value
    dep.write_tenants(beta={"egress": "open", "server_tools": ["web_fetch"]})
    assert Tenants(dep.root / "tenants.toml").get("beta").server_tools == frozenset({"web_fetch"})
    assert json.dumps(sorted(Tenants(dep.root / "tenants.toml").get("acme").server_tools)) == "[]"


# -- two gateways on one database: the budget is the database's, not a gateway's ---------------------------------
CALLERS = 100


def _gateway(root: Path, name: str, postgres_url: str) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m service gateway`` on a data dir of its own and the shared registry, serving TCP (as on Kubernetes:
    the token alone names the run); its URL once it listens."""
    config = root / f"{name}.toml"
    config.write_text(f'data_dir = "data-{name}"\ntenants = "tenants.toml"\nbackend = "kubernetes"\n'
                      f'image = "flower:test"\ngateway_host = "127.0.0.1"\ngateway_port = 0\n'
                      f'gateway_url = "http://127.0.0.1:1"\ndatabase_url = "{postgres_url}"\nreplica = "{name}"\n'
                      f'log_format = "json"\n{PRICES}')
    log = root / f"{name}.log"
    proc = subprocess.Popen([sys.executable, "-m", "service", "gateway", "--config", str(config)], cwd=ROOT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)

    def port() -> int | None:
        for line in log.read_text().splitlines():
            if '"gateway.listening"' in line:
                return int(json.loads(line)["port"])
        assert proc.poll() is None, log.read_text()[-2000:]
        return None

    return proc, f"http://127.0.0.1:{wait_for(port, timeout=60, what=f'gateway {name} listening')}"


def test_a_hundred_calls_at_once_through_two_gateways_pass_a_run_and_a_day_budget_by_at_most_one_call(
        tmp_path: Path, postgres_url: str) -> None:
    dep = Deployment(tmp_path)
    dep.write_tenants(acme={"budget_usd.run": 0.10}, beta={"budget_usd.day": 0.10})
    registry = Registry.postgres(postgres_url)
    tokens: dict[str, tuple[str, str]] = {}  # run → (tenant, its gateway token)
    for i, tenant in enumerate(("acme", "beta", "beta")):  # beta's day is shared by two runs
        run_id = f"20261204-000000-{uuid.uuid4().hex}"
        registry.create(id=run_id, tenant=tenant, ask="spend", options={}, repo=str(dep.repos[tenant]))
        token, digest = new_token()
        assert registry.begin(run_id, started=time.time()) and registry.record_running(run_id, f"k8s:{i}")
        assert registry.update(run_id, token_sha256=digest)
        tokens[run_id] = (tenant, token)
    flood = Rule(say("又花一笔", usage=CALL, delay=0.2), prompt="BUDGET", repeat=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with ScriptedModel([flood]) as model:
            for name, path in dep.creds.items():
                path.write_text(f"ANTHROPIC_BASE_URL={model.url}\nANTHROPIC_API_KEY={KEYS[name]}\n")
            urls = []
            for name in ("gw-a", "gw-b"):
                proc, url = _gateway(tmp_path, name, postgres_url)
                procs.append(proc)
                urls.append(url)
            answered: Counter[tuple[str, str]] = Counter()  # (gateway, status)
            refused: list[str] = []
            runs = list(tokens)

            def caller(i: int) -> None:
                run_id = runs[i % 3]
                url = urls[i % 2]  # every run's calls go through both gateways
                body = {"model": "flower-test-model", "max_tokens": 500,
                        "messages": [{"role": "user", "content": f"BUDGET {i} " + "x" * 6000}]}
                with httpx.Client(base_url=url, timeout=60, headers={"x-api-key": tokens[run_id][1]}) as c:
                    for _ in range(1000):  # held back for calls in flight (429): again; spent (403): done
                        status = c.post("/v1/messages", json=body).status_code
                        answered[(url, str(status))] += 1
                        if status == 403:
                            refused.append(run_id)
                            return
                        if status != 200:
                            time.sleep(0.02)

            threads = [threading.Thread(target=caller, args=(i,)) for i in range(CALLERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
        rows = {run_id: registry.get(run_id) for run_id in runs}
        day = registry.spent("beta", day_of())["cost_usd"]
        with psycopg.connect(postgres_url) as db:
            left = db.execute("SELECT count(*) FROM holds").fetchone()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(15)
        registry.close()
    acme = rows[runs[0]]
    assert acme is not None
    over_run, over_day = acme.cost_usd - 0.10, day - 0.10
    print(f"two gateways, {CALLERS} callers: {dict(answered)}; per-run budget $0.10: spent ${acme.cost_usd:.4f} "
          f"(overshoot ${over_run:.4f}); daily budget $0.10 over two runs: spent ${day:.4f} (overshoot "
          f"${over_day:.4f}); one call ${CALL_USD}")
    assert not any(t.is_alive() for t in threads) and len(refused) == CALLERS, "every caller was refused in the end"
    assert all(answered[(url, "200")] > 0 for url in urls), "both gateways let calls through"
    assert acme.cost_usd == pytest.approx(upstream_cost(model, "acme")[2], abs=1e-9)  # what the upstream reported
    assert day == pytest.approx(upstream_cost(model, "beta")[2], abs=1e-9)
    assert 0 <= over_run <= CALL_USD + 1e-9, f"the per-run budget was passed by ${over_run:.4f}"
    assert 0 <= over_day <= CALL_USD + 1e-9, f"the daily budget was passed by ${over_day:.4f}"
    assert left == (0,), "every call's hold was settled"

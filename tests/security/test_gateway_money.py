"""The tenant's money and its provider, attacked from inside a run (its worker's Bash talks to its own gateway
socket with its own token): an answer is metered from the upstream's side when the run hangs up before reading it,
concurrent calls never pass a budget — through one gateway, or two on one PostgreSQL — and only allowed headers,
server-side tools and content the provider would fetch reach the tenant's provider. Where no run is needed, a run's
token in hand: gateway processes of their own (``Wall``) on the registry, the tenants' upstream a scripted model."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from _service_helpers import ROOT, Deployment, Service, wait_for, wait_status
from _hostile import DONE, ENDED, hostile_deployment, worker_rules
from flower.testing import Rule, ScriptedModel, say
from service.config import ServiceConfig
from service.gateway.budgets import day_of
from service.gateway.daemon import GatewayProcess
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


# -- budgets: fifty calls at once from inside a run never pass a budget ---------------------------------------
FLOOD = """
stopped = []
def caller(i):
    for _ in range(400):  # a call the budget holds back for calls in flight (429) is retried; a 403 is final
        status, text = call(ask(f"BUDGET {i} " + "x" * 6000, max_tokens=2000))
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
CALL = {"input_tokens": 5_000, "output_tokens": 2_000}  # $0.01 + $0.02 at 2/10 per million: each call is $0.03
CALL_USD = 0.03
RUN_CAP = 1.00  # room for the CLI's own calls (each may cost ~$0.46: 32,000 out) and no multiple of a call's $0.03


def test_fifty_concurrent_calls_from_inside_a_run_never_pass_a_run_or_a_day_budget(
        tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    dep.config.write_text(dep.config.read_text() + PRICES)
    dep.write_tenants(acme={"budget_usd.run": RUN_CAP}, beta={"budget_usd.day": RUN_CAP})
    # each answer waits a little, so the calls truly overlap in the gateway
    flood = Rule(say("又花一笔", usage=CALL, delay=0.2), prompt="BUDGET", repeat=True)
    with ScriptedModel([flood, *worker_rules("花光预算", bash(FLOOD)), *worker_rules("花光日预算", bash(FLOOD))]) as model:
        service = start(dep, services, model)
        per_run, per_day = submit(service, "acme", "花光预算"), submit(service, "beta", "花光日预算")
        run = wait_status(service.client("acme"), per_run, ENDED, timeout=300)
        day_run = wait_status(service.client("beta"), per_day, ENDED, timeout=300)
        day = service.client("beta").get("/v1/usage").json()
    print(f"per-run budget ${RUN_CAP}: spent ${run['cost_usd']:.4f}; daily budget ${RUN_CAP}: spent "
          f"${day['cost_usd']:.4f}; one call ${CALL_USD}")
    assert run["status"] == "failed" and "per-run budget" in run["error"], run
    assert day_run["status"] == "failed" and "daily budget" in day_run["error"], day_run
    for tenant, spent in (("acme", run["cost_usd"]), ("beta", day["cost_usd"])):
        assert spent == pytest.approx(upstream_cost(model, tenant)[2], abs=1e-9)  # what the upstream reported
        assert RUN_CAP - 0.5 < spent <= RUN_CAP + 1e-9, f"{tenant}: spent ${spent:.4f} of ${RUN_CAP}"


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


# -- gateway processes on one registry: the budget is the registry's, not a gateway's ------------------------------
def _gateway(root: Path, name: str, postgres_url: str | None) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m service gateway`` on a data dir of its own — its registry there, or the shared PostgreSQL one —
    serving TCP (as on Kubernetes: the token alone names the run); its URL once it listens."""
    config = root / f"{name}.toml"
    database = f'database_url = "{postgres_url}"\n' if postgres_url else ""
    config.write_text(f'data_dir = "data-{name}"\ntenants = "tenants.toml"\nbackend = "kubernetes"\n'
                      f'image = "flower:test"\ngateway_host = "127.0.0.1"\ngateway_port = 0\n'
                      f'gateway_url = "http://127.0.0.1:1"\n{database}replica = "{name}"\n'
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


def _live_run(registry: Registry, dep: Deployment, tenant: str) -> tuple[str, str]:
    """A run of ``tenant`` made live in the registry by hand: its id and its gateway token."""
    run_id = f"20261204-000000-{uuid.uuid4().hex}"
    registry.runs.create(id=run_id, tenant=tenant, ask="spend", options={}, repo=str(dep.repos[tenant]))
    token, digest = new_token()
    assert registry.runs.begin(run_id, started=time.time()) and registry.runs.record_running(run_id, "k8s:x")
    assert registry.runs.update(run_id, token_sha256=digest)
    return run_id, token


class Wall:
    """Gateway processes on one registry (SQLite: one gateway on its data dir; PostgreSQL: ``gateways`` of them),
    the tenants' credentials pointing at the scripted model; runs made live in the registry by hand."""

    def __init__(self, root: Path, dep: Deployment, model: ScriptedModel, postgres_url: str | None,
                 gateways: int = 1, **env: str) -> None:
        self.root, self.dep = root, dep
        for name, path in dep.creds.items():
            path.write_text("".join(f"{k}={v}\n" for k, v in {"ANTHROPIC_BASE_URL": model.url,
                                                                 "ANTHROPIC_API_KEY": KEYS[name], **env}.items()))
        self.registry = (Registry.postgres(postgres_url) if postgres_url
                         else Registry(root / "data-gw-0" / "registry.sqlite3"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.urls: list[str] = []
        for i in range(gateways if postgres_url else 1):
            proc, url = _gateway(root, f"gw-{i}", postgres_url)
            self.procs.append(proc)
            self.urls.append(url)

    def run(self, tenant: str) -> tuple[str, str]:
        """A live run of ``tenant``: its id and its gateway token."""
        return _live_run(self.registry, self.dep, tenant)

    def lines(self) -> list[dict[str, object]]:
        return [json.loads(line) for i in range(len(self.procs))
                for line in (self.root / f"gw-{i}.log").read_text().splitlines() if line.startswith("{")]

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(15)
        self.registry.close()


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> str | None:
    """The registry the gateways share: SQLite (one gateway), or PostgreSQL (two)."""
    return str(request.getfixturevalue("postgres_url")) if request.param == "postgres" else None


CAP = 0.10
DEAR = {"input_tokens": 5_000, "output_tokens": 2_000}  # $0.01 + $0.02: three fit in $0.10, a fourth would pass it
DEAR_USD = 0.03


def test_forty_calls_at_once_from_one_run_and_from_two_runs_of_one_tenant_never_pass_a_budget(
        tmp_path: Path, database: str | None) -> None:
    """Each call may cost up to ~$0.035 (6 KB in, 2,000 out) and costs $0.03: the cap, $0.10, is no multiple of
    it, so a gateway that lets in the call that crosses it is caught. Per-run cap: 40 callers on one run; daily
    cap: 20 callers on each of two runs of one tenant; every call through every gateway."""
    dep = Deployment(tmp_path)
    dep.write_tenants(acme={"budget_usd.run": CAP}, beta={"budget_usd.day": CAP})
    flood = Rule(say("又花一笔", usage=DEAR, delay=0.2), prompt="BUDGET", repeat=True)
    with ScriptedModel([flood]) as model:
        wall = Wall(tmp_path, dep, model, database, gateways=2)
        try:
            runs = [wall.run("acme"), wall.run("beta"), wall.run("beta")]
            answered: Counter[str] = Counter()
            stopped: list[str] = []

            def caller(i: int, run: tuple[str, str]) -> None:
                body = {"model": "flower-test-model", "max_tokens": 2_000,
                        "messages": [{"role": "user", "content": f"BUDGET {i} " + "x" * 6000}]}
                with httpx.Client(base_url=wall.urls[i % len(wall.urls)], timeout=60,
                                  headers={"x-api-key": run[1]}) as c:
                    for _ in range(1000):  # held back for calls in flight (429): again; no room left (403): done
                        r = c.post("/v1/messages", json=body)
                        answered[str(r.status_code)] += 1
                        if r.status_code == 403:
                            stopped.append(r.json()["error"]["message"])
                            return
                        if r.status_code != 200:
                            time.sleep(0.02)

            threads: list[threading.Thread] = []
            for flood_of in ([runs[0]], runs[1:]):  # one run's 40 callers, then two runs' 20 each (a peer's bound: 64)
                threads = [threading.Thread(target=caller, args=(i, flood_of[i % len(flood_of)])) for i in range(40)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(300)
            acme = wall.registry.runs.get(runs[0][0])
            day = wall.registry.spend.spent("beta", day_of(time.time()))["cost_usd"]
            left = [wall.registry.runs.get(r) for r, _ in runs]
        finally:
            wall.close()
    assert acme is not None and all(r is not None for r in left)
    print(f"{database and 'postgres, two gateways' or 'sqlite, one gateway'}: {dict(answered)}; per-run cap ${CAP}: "
          f"spent ${acme.cost_usd:.4f}; daily cap ${CAP} over two runs: spent ${day:.4f}; one call ${DEAR_USD}")
    assert not any(t.is_alive() for t in threads) and len(stopped) == 80, "every caller was refused in the end"
    assert acme.cost_usd == pytest.approx(upstream_cost(model, "acme")[2], abs=1e-9)  # what the upstream reported
    assert day == pytest.approx(upstream_cost(model, "beta")[2], abs=1e-9)
    assert acme.cost_usd <= CAP + 1e-9, f"the per-run budget was passed: ${acme.cost_usd:.4f} of ${CAP}"
    assert day <= CAP + 1e-9, f"the daily budget was passed: ${day:.4f} of ${CAP}"
    assert acme.cost_usd > CAP - 2 * DEAR_USD and day > CAP - 2 * DEAR_USD, "the budgets were used, not left"
    assert all(m.startswith("flower gateway: over budget: ") for m in stopped), set(stopped)
    assert any("more than is left" in m and "budget_usd.run" in m for m in stopped), set(stopped)
    assert any("more than is left" in m and "budget_usd.day" in m for m in stopped), set(stopped)


def test_a_call_whose_most_alone_passes_the_cap_is_refused_with_a_sentence_and_never_forwarded(
        tmp_path: Path) -> None:
    dep = Deployment(tmp_path)
    dep.write_tenants(acme={"budget_usd.run": CAP})
    with ScriptedModel([Rule(say("贵"), prompt="HUGE", repeat=True)]) as model:
        wall = Wall(tmp_path, dep, model, None)
        try:
            run_id, token = wall.run("acme")
            body = {"model": "flower-test-model", "max_tokens": 20_000,  # $0.20 of output alone
                    "messages": [{"role": "user", "content": "HUGE"}]}
            r = httpx.post(wall.urls[0] + "/v1/messages", json=body, headers={"x-api-key": token}, timeout=30)
            again = httpx.post(wall.urls[0] + "/v1/messages", json={**body, "max_tokens": 100},
                               headers={"x-api-key": token}, timeout=30)
        finally:
            wall.close()
    print(r.status_code, r.text)
    assert r.status_code == 403 and not [x for x in model.requests if "HUGE" in x.prompt], r.text
    message = r.json()["error"]["message"]
    assert re.search(r"may cost up to \$0\.20\d+ .*more than its whole \$0\.10 per-run budget", message), message
    assert "`CLAUDE_CODE_MAX_OUTPUT_TOKENS`" in message and "`budget_usd.run`" in message, message
    assert again.status_code == 403 and again.json()["error"]["message"] == message, "the run may spend no more"


async def test_a_pass_and_a_first_call_opening_one_runs_grant_at_once_open_one_and_its_refusal_holds(
        tmp_path: Path) -> None:
    """Kubernetes: a run's grant is opened by the gateway's pass and by the run's first call (a token no grant holds
    yet). Both at once opened two, the later replacing the earlier and what it held: the run's call refused as more
    than its whole budget was followed by one the fresh grant let through (seen on a loaded machine). Here the pass
    is held half-way through its opening while the first call is refused."""
    dep = Deployment(tmp_path)
    dep.write_tenants(acme={"budget_usd.run": CAP})
    with ScriptedModel([Rule(say("贵"), prompt="HUGE", repeat=True)]) as model:
        dep.creds["acme"].write_text(f"ANTHROPIC_BASE_URL={model.url}\nANTHROPIC_API_KEY={KEYS['acme']}\n")
        config = ServiceConfig(data_dir=str(tmp_path / "data"), backend="kubernetes", min_free_mb=0,
                               guard_canary=False, tenants=str(tmp_path / "tenants.toml"),
                               prices={"flower-test-model": (2.0, 10.0)})
        registry = Registry(config.db_path)
        process = GatewayProcess(config, registry, Tenants(config.tenants))
        halfway, go_on = threading.Event(), threading.Event()
        run_budget = registry.spend.run_budget

        def held(run_id: str) -> float | None:  # the pass's read of the run's budget: until the first call is answered
            if not halfway.is_set():
                halfway.set()
                go_on.wait(30)
            return run_budget(run_id)

        registry.spend.run_budget = held  # type: ignore[method-assign]
        try:
            port = await process.gateway.listen_tcp("127.0.0.1", 0)
            _, token = _live_run(registry, dep, "acme")
            passing = asyncio.create_task(process.sync())
            assert await asyncio.to_thread(halfway.wait, 30), "the pass never read the run's budget"
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                         headers={"x-api-key": token}) as c:
                body = {"model": "flower-test-model", "max_tokens": 20_000,
                        "messages": [{"role": "user", "content": "HUGE"}]}
                huge = await c.post("/v1/messages", json=body)
                go_on.set()
                await passing
                small = await c.post("/v1/messages", json={**body, "max_tokens": 100})
        finally:
            go_on.set()
            await process.gateway.aclose()
            registry.close()
    assert huge.status_code == 403, huge.text
    assert small.status_code == 403 and small.json() == huge.json(), small.text
    assert not [x for x in model.requests if "HUGE" in x.prompt]


PIXELS = {"input_tokens": 3_300, "output_tokens": 1_000}  # two pictures' 1,600 tokens each and the text: $0.0166


def test_pictures_are_held_at_what_their_pixels_cost_not_their_bytes_and_a_budget_still_holds(tmp_path: Path) -> None:
    """Two 1x1 PNGs are 200 bytes of a request, and the API may count a picture at up to ~4,800 tokens: held by
    bytes, ten calls at once would fit the budget and pass it when answered. Held at what a picture may cost, the
    budget holds."""
    dep = Deployment(tmp_path)
    dep.write_tenants(acme={"budget_usd.run": CAP})
    picture = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    with ScriptedModel([Rule(say("看到了", usage=PIXELS, delay=0.3), prompt="PIXELS", repeat=True)]) as model:
        wall = Wall(tmp_path, dep, model, None)
        try:
            run_id, token = wall.run("acme")
            statuses: list[int] = []

            def caller(i: int) -> None:
                body = {"model": "flower-test-model", "max_tokens": 1_000, "messages": [{"role": "user", "content": [
                    picture, {"type": "tool_result", "tool_use_id": "toolu_1", "content": [picture]},
                    {"type": "text", "text": f"PIXELS {i}"}]}]}
                with httpx.Client(base_url=wall.urls[0], timeout=60, headers={"x-api-key": token}) as c:
                    for _ in range(200):
                        status = c.post("/v1/messages", json=body).status_code
                        statuses.append(status)
                        if status == 403:
                            return
                        if status != 200:
                            time.sleep(0.02)

            threads = [threading.Thread(target=caller, args=(i,)) for i in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            row = wall.registry.runs.get(run_id)
        finally:
            wall.close()
    assert row is not None
    print(f"pictures: {Counter(statuses)}; spent ${row.cost_usd:.4f} of ${CAP}")
    assert statuses.count(403) == 10 and statuses.count(200) >= 2, Counter(statuses)
    assert row.cost_usd == pytest.approx(upstream_cost(model, "acme")[2], abs=1e-9)
    assert row.cost_usd <= CAP + 1e-9, f"the budget was passed: ${row.cost_usd:.4f} of ${CAP}"


# -- a URL is egress: content the provider would fetch is refused for closed egress, wherever it sits ------------
URL = "http://127.0.0.1:9/leak?what=the-secret-the-run-read"
DOC = {"type": "document", "source": {"type": "url", "url": URL}}
FETCHES = {  # each: a request's extra fields, the conversation's one place that makes the provider fetch
    "a user message's document": {"messages": [{"role": "user", "content": [DOC, {"type": "text", "text": "FETCH"}]}]},
    "the system prompt's image": {"system": [{"type": "image", "source": {"type": "url", "url": URL}}]},
    "a tool result's document": {"messages": [
        {"role": "user", "content": "FETCH"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [DOC]}]}]},
    "a document's own image, from a file": {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "FETCH"}, {"type": "document", "source": {"type": "content", "content": [
            {"type": "image", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}}]}}]}]},
    "an uploaded file for the container": {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "FETCH"}, {"type": "container_upload", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}]}]},
}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def test_url_and_file_sources_are_refused_for_a_closed_egress_run_wherever_they_sit_and_written_in_the_wire_audit(
        tmp_path: Path) -> None:
    dep = Deployment(tmp_path)  # acme: closed egress (listing them changes nothing); beta: open, and lists them
    dep.write_tenants(acme={"server_tools": ["url_sources", "file_sources"]},
                      beta={"egress": "open", "server_tools": ["url_sources", "file_sources"]})
    with ScriptedModel([Rule(say("读到了"), prompt="FETCH", repeat=True)]) as model:
        wall = Wall(tmp_path, dep, model, None)
        try:
            (closed, closed_token), (opened, open_token) = wall.run("acme"), wall.run("beta")
            answers: dict[tuple[str, str, str], httpx.Response] = {}
            for where, extra in FETCHES.items():
                body = {"model": "flower-test-model", "max_tokens": 100,
                        "messages": [{"role": "user", "content": "FETCH"}], **extra}
                for run, token in ((closed, closed_token), (opened, open_token)):
                    for path in ("/v1/messages", "/v1/messages/count_tokens"):
                        answers[(run, where, path)] = httpx.post(wall.urls[0] + path, json=body, timeout=30,
                                                                 headers={"x-api-key": token})
            inline = httpx.post(wall.urls[0] + "/v1/messages", headers={"x-api-key": closed_token}, timeout=30, json={
                "model": "flower-test-model", "max_tokens": 100, "messages": [{"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    {"type": "text", "text": "FETCH inline"}]}]})
            lines = wall.lines()
        finally:
            wall.close()
    for (run, where, path), r in answers.items():
        print(run == closed and "closed" or "open", where, path, r.status_code, r.text[:300])
    for where in FETCHES:
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            r = answers[(closed, where, path)]
            assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error", (where, path, r.text)
            assert "is not forwarded for this run: the provider would fetch it" in r.text, (where, r.text)
            assert 'send the content itself' in r.text and 'egress = \\"open\\"' in r.text, r.text
            assert answers[(opened, where, "/v1/messages")].status_code == 200, where
    assert inline.status_code == 200, inline.text  # content sent inline is no egress
    sent = [r for r in model.requests if r.headers.get("x-api-key") == KEYS["acme"]]
    assert len(sent) == 1 and URL not in json.dumps(sent[0].body), "nothing of acme's that fetches was forwarded"
    assert sum(URL in json.dumps(r.body) for r in model.requests) >= 3, "beta's went (its egress is open)"
    audit = [x for x in lines if x.get("event") == "audit.egress_refused" and x.get("run") == closed]
    print(audit)
    assert audit and all(x["source"] == "wire" and x["tenant"] == "acme" and x["status"] == 403 for x in audit)
    assert {"url_sources", "file_sources"} <= {k for x in audit for k in x["sources"]}, audit
    assert not [x for x in lines if x.get("event") == "audit.egress_refused" and x.get("run") == opened]


def test_a_run_varying_its_refused_tools_names_writes_one_audit_line_per_streak_not_one_per_request(
        tmp_path: Path) -> None:
    """The names are the run's to choose: a streak is keyed by the kind of refusal, so 60 requests with 60 new
    server tool names (and URL sources beside them) are 60 refusals and two audit lines, not 60."""
    dep = Deployment(tmp_path)
    with ScriptedModel([Rule(say("不该到这里"), prompt="FETCH", repeat=True)]) as model:
        wall = Wall(tmp_path, dep, model, None)
        try:
            run, token = wall.run("acme")
            codes = []
            for i in range(60):
                extra = FETCHES["the system prompt's image"] if i % 2 else {}
                body = {"model": "flower-test-model", "max_tokens": 100, "tools": [{"type": f"made_up_{i}_20250101",
                        "name": f"t{i}"}], "messages": [{"role": "user", "content": "FETCH"}], **extra}
                codes.append(httpx.post(wall.urls[0] + "/v1/messages", json=body, timeout=30,
                                        headers={"x-api-key": token}).status_code)
            lines = wall.lines()
        finally:
            wall.close()
    assert codes == [403] * 60 and not model.requests
    audit = [x for x in lines if x.get("event") == "audit.egress_refused" and x.get("run") == run]
    assert len(audit) == 2, [(x["tools"], x["sources"]) for x in audit]  # tools alone; tools with URL sources


# -- what reaches the provider of a run's headers: exactly the allowed names, never the run's token --------------
RUN_HEADERS = [  # what a hostile run sends beside its token: credentials, routing, proxies, and the CLI's own
    ("cookie", "session=stolen"), ("proxy-authorization", "Basic cnVuOnJ1bg=="), ("x-forwarded-for", "198.51.100.7"),
    ("forwarded", "for=198.51.100.7"), ("x-real-ip", "198.51.100.7"), ("via", "1.1 run"), ("origin", "http://run"),
    ("referer", "http://run/"), ("x-tenant-route", "from-the-run"), ("x-amz-security-token", "run"),
    ("anthropic-organization-id", "org-run"), ("x-goog-api-key", "run"), ("te", "trailers"),
    ("anthropic-beta", "files-api-2025-04-14,claude-code-20250219"), ("user-agent", "claude-cli/2.0.0 (external)"),
    ("x-app", "cli"), ("x-claude-code-session-id", "5d0c2b1e-1111-4e0b-9a43-2f4c6b1d7e11"),
    ("x-stainless-lang", "js"), ("x-stainless-retry-count", "0"), ("x-stainless-os", "Linux"),
    ("anthropic-dangerous-direct-browser-access", "true"), ("accept", "application/json"),
]
CLEAN = {"anthropic-version", "content-type", "user-agent", "x-app", "x-claude-code-session-id", "x-stainless-lang",
         "x-stainless-retry-count", "x-stainless-os", "anthropic-dangerous-direct-browser-access", "accept"}


def test_exactly_the_allowed_header_names_reach_the_provider_and_no_value_holds_the_runs_token(
        tmp_path: Path) -> None:
    """The run's token goes in x-api-key, authorization and proxy-authorization at once, with every header a run may
    try; the upstream (a real server) records what it got. What reaches it: the run's headers in PASSED, the
    tenant's key and custom header, the one joined beta, and what the client itself writes — no other name."""
    dep = Deployment(tmp_path)
    with ScriptedModel([Rule(say("好"), prompt="HEADERS", repeat=True)]) as model:
        wall = Wall(tmp_path, dep, model, None, ANTHROPIC_CUSTOM_HEADERS="x-tenant-route: tenant-value")
        try:
            run_id, token = wall.run("acme")
            r = httpx.post(wall.urls[0] + "/v1/messages", timeout=30, headers=[
                ("x-api-key", token), ("authorization", f"Bearer {token}"),
                ("proxy-authorization", f"Bearer {token}"), ("x-auth-token", token), ("anthropic-version", "2023-06-01"),
                *RUN_HEADERS], json={"model": "flower-test-model", "max_tokens": 50,
                                     "messages": [{"role": "user", "content": "HEADERS"}]})
        finally:
            wall.close()
    assert r.status_code == 200, r.text
    got = next(x for x in model.requests if "HEADERS" in x.prompt).header_list
    print(got)
    names = [name for name, _ in got]
    assert sorted(names) == sorted(CLEAN | {"x-api-key", "x-tenant-route", "anthropic-beta", "accept-encoding",
                                            "host", "content-length"}), sorted(names)
    assert not [v for _, v in got if token in v or token[len("flower-run-"):] in v], "the run's token went on"
    assert dict(got)["x-api-key"] == KEYS["acme"] and dict(got)["x-tenant-route"] == "tenant-value"
    assert dict(got)["anthropic-beta"] == "claude-code-20250219"


def test_a_passed_header_with_control_characters_or_over_long_is_dropped(tmp_path: Path) -> None:
    dep = Deployment(tmp_path)
    sent = {"user-agent": "claude-cli/2.0.0 \x1b]0;owned\x07\x1b[2J", "x-stainless-os": "Linux\x1f",
            "x-stainless-lang": "js\x7f", "x-claude-code-session-id": "s" * 300, "x-app": "cli\x01",
            "x-stainless-arch": "x64", "x-stainless-runtime": "node"}
    with ScriptedModel([Rule(say("好"), prompt="BYTES", repeat=True)]) as model:
        wall = Wall(tmp_path, dep, model, None)
        try:
            run_id, token = wall.run("acme")
            # by hand: httpx will not send a control character in a header
            host, port = wall.urls[0].removeprefix("http://").split(":")
            body = json.dumps({"model": "flower-test-model", "max_tokens": 50,
                               "messages": [{"role": "user", "content": "BYTES"}]}).encode()
            head = (f"POST /v1/messages HTTP/1.1\r\nhost: gw\r\nx-api-key: {token}\r\ncontent-type: application/json"
                    f"\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
                    + "".join(f"{k}: {v}\r\n" for k, v in sent.items()) + "\r\n").encode("latin-1")
            with socket.create_connection((host, int(port)), timeout=30) as s:
                s.sendall(head + body)
                answer = b""
                while chunk := s.recv(65536):
                    answer += chunk
        finally:
            wall.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    got = dict(next(x for x in model.requests if "BYTES" in x.prompt).header_list)
    print(got)
    assert {k: got.get(k) for k in sent} == {
        "user-agent": None, "x-stainless-os": None, "x-stainless-lang": None, "x-claude-code-session-id": None,
        "x-app": None, "x-stainless-arch": "x64", "x-stainless-runtime": "node"}, got
    assert not [v for v in got.values() if any(ord(c) < 0x20 or ord(c) == 0x7f for c in v)], got

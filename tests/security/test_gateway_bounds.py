"""The model gateway's bounds, through the service as an operator runs it: a run whose Bash floods its own gateway
socket with connections, then holds request bodies open (stalled, trickled, too many at once), costs the service a
bounded number of fds and bytes, is cut within the timeouts and logs one line per streak — while the other tenant's
API and runs go on. The TCP listener (the Kubernetes way in) turns away one peer's flood before any token."""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from _service_helpers import Deployment, Service, gateway_pid, wait_for, wait_status
from _hostile import DONE, ENDED, hostile_deployment, worker_rules
from flower.testing import Rule, ScriptedModel, say
from service.config import ServiceConfig
from service.gateway import MAX_PEER_CONNECTIONS, new_token
from service.gateway.daemon import RESOLVE_S, GatewayProcess
from service.registry import Registry, Run
from service.tenants import Tenants

pytestmark = pytest.mark.cli

FLOOD = 3000
HOG = r"""set +e
"$(command -v python3 || command -v python)" - <<'PY'
import os, socket, threading, time
path = os.environ["FLOWER_GATEWAY_SOCKET"]
folder = os.open(os.path.dirname(path), os.O_RDONLY)
target = f"/proc/self/fd/{folder}/{os.path.basename(path)}"
FLOOD = __FLOOD__

def wait_file(name, limit):
    end = time.monotonic() + limit
    while not os.path.exists(name) and time.monotonic() < end:
        time.sleep(0.1)

def closed(s, got):
    "Read what came; True once the gateway closed the connection."
    try:
        while data := s.recv(65536):
            got += data
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True

# 1: connections that send nothing, as many as the socket takes
held, end = [], time.monotonic() + 5
while len(held) < FLOOD and time.monotonic() < end:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(target)
        held.append(s)
    except OSError:
        s.close()
        time.sleep(0.001)
open("flood.held", "w").write(str(len(held)))
wait_file("flood.release", 150)
print("FLOOD connected", len(held), "of", FLOOD, "closed by the gateway", sum(closed(s, bytearray()) for s in held))
for s in held:
    s.close()

# 2: bodies of 40 MB declared: one trickled a byte a second, twelve sent but their last megabyte
size, token = 40 << 20, os.environ["ANTHROPIC_API_KEY"]
head = (f"POST /v1/messages HTTP/1.1\r\nhost: gateway\r\nx-api-key: {token}\r\n"
        f"content-type: application/json\r\ncontent-length: {size}\r\n\r\n").encode()

def request():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(target)
    s.sendall(head)
    return s

trickle = request()
def drip():
    try:
        while True:
            trickle.send(b" ")
            time.sleep(1)
    except OSError:
        pass
threading.Thread(target=drip, daemon=True).start()
bodies, chunk = [trickle], b" " * (1 << 20)
for _ in range(12):
    s = request()
    try:
        for _ in range(size // len(chunk) - 1):
            s.sendall(chunk)
    except OSError:
        pass  # answered and closed before the body was read
    bodies.append(s)
open("bodies.sent", "w").write("")
answers = [bytearray() for _ in bodies]
for s in bodies:
    s.setblocking(False)
started, cut = time.monotonic(), {}
while len(cut) < len(bodies) and time.monotonic() - started < 60:
    for i, s in enumerate(bodies):
        if i not in cut and closed(s, answers[i]):
            cut[i] = time.monotonic() - started
    time.sleep(0.2)
statuses = sorted(a[9:12].decode() or "none" for a in answers)
print("BODIES closed", len(cut), "of", len(bodies), "trickle", "cut" if 0 in cut else "held",
      "answers", " ".join(statuses))
os.remove("flood.held"); os.remove("bodies.sent")
PY
echo PROBE-DONE""".replace("__FLOOD__", str(FLOOD)).replace("PROBE-DONE", DONE)


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def vm_hwm_mb(pid: int) -> float:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


@contextmanager
def fd_peak(pid: int) -> Iterator[list[int]]:
    """The service's fd count, sampled every 20 ms while the block runs: ``[peak]``."""
    peak, stop = [fds(pid)], threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], fds(pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


def p99_ms(service: Service, tenant: str, n: int = 50) -> float:
    times = []
    with service.client(tenant) as c:
        for _ in range(n):
            t0 = time.perf_counter()
            assert c.get("/v1/runs").status_code == 200
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.quantiles(times, n=100)[98]


def start(dep: Deployment, services: list[Service], model: ScriptedModel | None = None) -> Service:
    if model is not None:
        dep.set_credentials(model.env)
    service = Service(dep).start(timeout=120)
    services.append(service)
    return service


def gateway_of(dep: Deployment) -> int:
    """The gateway's process (beside the service's: what a run's connections cost is counted there)."""
    pid: int = wait_for(lambda: gateway_pid(dep.data), 30, what="the gateway process serving")
    return pid


def bound_lines(service: Service, bound: str, **who: str) -> list[dict]:
    return [x for x in service.lines() if x.get("event") == "gateway.bound" and x.get("bound") == bound
            and all(x.get(k) == v for k, v in who.items())]


def submit(service: Service, tenant: str, ask: str) -> str:
    r = service.client(tenant).post("/v1/runs", json={"ask": ask, "options": {"rounds": 1, "timeout_s": 30}})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_a_run_flooding_its_gateway_socket_and_holding_bodies_costs_the_service_a_bounded_share(
        tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    rules = worker_rules("占满网关", HOG) + worker_rules("beta 的活", f"echo hello > hello.txt; echo {DONE}")
    with ScriptedModel(rules) as model:
        service = start(dep, services, model)
        pid = gateway_of(dep)
        a = submit(service, "acme", "占满网关")
        work = dep.data / "runs" / a / dep.repos["acme"].name
        wait_status(service.client("acme"), a, ("running",), timeout=120)
        base = fds(pid)
        with fd_peak(pid) as flood_peak:
            wait_for(lambda: (work / "flood.held").exists(), 180, what="the run's flood to be held")
            connected = int((work / "flood.held").read_text())
            p99 = p99_ms(service, "beta")
            b = submit(service, "beta", "beta 的活")
            rb = wait_status(service.client("beta"), b, ENDED, timeout=180)
            health = service.client("beta").get("/healthz")
            # held until the gateway has cut the silent ones (a head in 10 s), however fast beta's run was
            wait_for(lambda: bound_lines(service, "head_timeout", run=a), 60, what="the held heads to time out")
        rss_before = vm_hwm_mb(pid)
        (work / "flood.release").write_text("")
        # each of the 13 requests may wait out its own 20 s socket timeout on a loaded machine
        wait_for(lambda: (work / "bodies.sent").exists(), 300, what="the run's bodies to be sent")
        ra = wait_status(service.client("acme"), a, ENDED, timeout=180)
        rss_peak = vm_hwm_mb(pid)
        out = max((r["text"] for req in model.conversation for r in req.results if "BODIES" in r["text"]),
                  key=len, default="")
    flood = next((x for x in out.splitlines() if x.startswith("FLOOD")), "")
    bodies = next((x for x in out.splitlines() if x.startswith("BODIES")), "")
    print(f"flood: {connected} of {FLOOD} connected; gateway fds {base} before, peak {flood_peak[0]}; "
          f"beta GET /v1/runs p99 {p99:.1f} ms over 50 | {flood}")
    print(f"bodies: service VmHWM {rss_before:.0f} MB before, {rss_peak:.0f} MB after | {bodies}")
    assert rb["status"] == "succeeded" and health.status_code == 200, (rb["status"], rb["error"], health.text)
    assert flood_peak[0] - base < 300, f"the flood cost the service {flood_peak[0] - base} fds"
    assert rss_peak - rss_before < 150, f"held bodies cost the service {rss_peak - rss_before:.0f} MB"
    assert bodies.startswith("BODIES closed 13 of 13 trickle cut"), out[-2000:]  # none held past the timeouts
    assert "429" in bodies, bodies  # past the run's bytes in flight, a body is refused before it is read
    assert ra["status"] == "succeeded", (ra["status"], ra["error"])  # the run's own CLI went on afterwards
    for bound in ("run_connections", "head_timeout", "body_timeout"):  # one line per streak, not per connection
        assert len(bound_lines(service, bound, run=a)) == 1, (bound, bound_lines(service, bound))


def test_one_peer_flooding_the_tcp_listener_without_a_token_is_turned_away_past_its_bound(
        tmp_path: Path, services: list[Service]) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    dep.config.write_text(dep.config.read_text() + "gateway_port = 0\ngateway_host = \"127.0.0.1\"\n")
    service = start(dep, services)
    pid = gateway_of(dep)
    port = wait_for(lambda: next((x["port"] for x in service.lines() if x.get("event") == "gateway.listening"), None),
                    30, what="the gateway's TCP listener")
    base = fds(pid)
    with fd_peak(pid) as peak:
        flood = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(4 * MAX_PEER_CONNECTIONS)]
        for s in flood:
            s.setblocking(False)

        def gone(s: socket.socket) -> bool:
            try:
                return s.recv(1) == b""
            except BlockingIOError:
                return False
            except OSError:
                return True

        turned_away = wait_for(lambda: (n := sum(gone(s) for s in flood)) >= 3 * MAX_PEER_CONNECTIONS and n, 30,
                               what="the connections past the peer's bound to be closed")
        p99 = p99_ms(service, "acme")
        health = service.client().get("/healthz")
        open_left = [s for s in flood if not gone(s)]
        wait_for(lambda: all(gone(s) for s in open_left), 60, what="the held connections to time out on their head")
    for s in flood:
        s.close()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # the listener still answers
        s.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: gw\r\ncontent-length: 2\r\n\r\n{}")
        answer = s.recv(65536)
    print(f"tcp flood: {len(flood)} connections, {turned_away} turned away at once; gateway fds {base} before, "
          f"peak {peak[0]}; acme GET /v1/runs p99 {p99:.1f} ms over 50")
    assert health.status_code == 200
    assert len(open_left) <= MAX_PEER_CONNECTIONS, len(open_left)
    assert peak[0] - base < 2 * MAX_PEER_CONNECTIONS, (base, peak[0])
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert len(bound_lines(service, "peer_connections", peer="127.0.0.1")) == 1
    assert len(bound_lines(service, "head_timeout", peer="127.0.0.1")) == 1


async def test_unknown_tokens_on_the_tcp_listener_share_the_gateways_registry_reads(tmp_path: Path) -> None:
    """Kubernetes: a token no grant holds is looked up in the registry (a run may have started since the last pass).
    Sixty made-up tokens at once cost a read each on the old gateway; here they share reads, at most
    one every ``RESOLVE_S`` — while a real run's token, never seen by a pass, is still found at its first request."""
    dep = Deployment(tmp_path)
    with ScriptedModel([Rule(say("在"), prompt="REAL", repeat=True)]) as model:
        dep.set_credentials({"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-tenant-key"})
        config = ServiceConfig(data_dir=str(tmp_path / "data"), backend="kubernetes", min_free_mb=0,
                               guard_canary=False, tenants=str(tmp_path / "tenants.toml"))
        registry = Registry(config.db_path)
        process = GatewayProcess(config, registry, Tenants(config.tenants))  # no passes: every token is unknown
        reads = [0]
        active_grants = registry.runs.active_grants

        def counted() -> list[Run]:
            reads[0] += 1
            return active_grants()

        registry.active_grants = counted  # type: ignore[method-assign]
        try:
            port = await process.gateway.listen_tcp("127.0.0.1", 0)
            run_id = f"20261204-000000-{uuid.uuid4().hex}"
            registry.runs.create(id=run_id, tenant="acme", ask="x", options={}, repo=str(dep.repos["acme"]))
            token, digest = new_token()
            assert registry.runs.begin(run_id, started=time.time()) and registry.runs.record_running(run_id, "k8s:x")
            assert registry.runs.update(run_id, token_sha256=digest)

            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                         limits=httpx.Limits(max_connections=60)) as c:
                async def call(key: str, text: str = "FAKE") -> int:
                    r = await c.post("/v1/messages", headers={"x-api-key": key}, json={
                        "model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": text}]})
                    return r.status_code

                started = time.monotonic()
                made_up = await asyncio.gather(*(call(new_token()[0]) for _ in range(60)))
                elapsed = time.monotonic() - started
                flooded = reads[0]
                real = await call(token, "REAL")
        finally:
            await process.gateway.aclose()
            registry.close()
    print(f"60 made-up tokens at once: {flooded} registry reads in {elapsed:.2f} s (RESOLVE_S {RESOLVE_S}); "
          f"a real run's first call: {real}")
    assert made_up == [401] * 60
    assert flooded <= 2 + elapsed / RESOLVE_S, f"{flooded} reads of every active run for 60 unknown tokens"
    assert real == 200 and [r for r in model.requests if "REAL" in r.prompt]

"""Issue 31, webhooks fair and bounded: a tenant whose receiver trickles its answer (one byte at a time, each well
within any read timeout) holds up only its own webhooks — another tenant's ``run.ended`` still arrives at once —
its tries end at the whole-try deadline and are tried again, and two replicas on one PostgreSQL send no try twice,
however long a receiver holds one. Real receivers on 127.0.0.1; the two replicas are ``python -m service`` with
real runs of the bundled CLI against the scripted model."""

from __future__ import annotations

import asyncio
import socketserver
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from _service_helpers import Deployment, Service, wait_for, wait_status
from flower.testing import Rule, ScriptedModel, say
from sandbox.testing import BRIEF, CLARIFIER
from service.registry import Registry
from service.tenants import Tenants
from service.results.webhooks import Webhooks
from test_results import ENDED, SECRET, Receiver

ARRIVES_S = 15.0  # the bound of the issue: another tenant's run.ended arrives within it (it waited minutes)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True


class Trickler:
    """A webhook receiver that reads each POST whole, counts it by its ``X-Flower-Delivery``, then sends its status
    line one byte every ``every`` s for ``hold`` s before answering 200 — every try, or (``first_only``) only the
    first of each delivery, the later ones at once. ``open`` is the tries it holds now, ``most_open`` the most."""

    def __init__(self, *, hold: float, every: float = 1.0, first_only: bool = False) -> None:
        self.tries: Counter[str] = Counter()
        self.open = self.most_open = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        trickler = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = self.request.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                block, _, body = head.partition(b"\r\n\r\n")
                fields = dict(line.split(": ", 1) for line in block.decode().split("\r\n")[1:])
                headers = {k.lower(): v for k, v in fields.items()}
                while len(body) < int(headers["content-length"]):
                    body += self.request.recv(65536)
                with trickler.lock:
                    trickler.tries[headers["x-flower-delivery"]] += 1
                    slow = not first_only or trickler.tries[headers["x-flower-delivery"]] == 1
                    trickler.open += 1
                    trickler.most_open = max(trickler.most_open, trickler.open)
                try:
                    if slow:
                        status = b"HTTP/1.1 200 " + b"O" * int(hold / every)  # a reason phrase as long as the hold
                        for byte in status:
                            self.request.sendall(bytes([byte]))
                            if trickler.stop.wait(every):
                                return
                    else:
                        self.request.sendall(b"HTTP/1.1 200 OK")
                    self.request.sendall(b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass  # the sender gave up on the try
                finally:
                    with trickler.lock:
                        trickler.open -= 1

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/flower"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


async def _until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await asyncio.sleep(0.05)


def _hooked(deployment: Deployment, **urls: str) -> None:
    """Each named tenant's webhook at its URL, signed with ``SECRET``."""
    secret = deployment.root / "secrets" / "hook"
    secret.write_text(SECRET)
    deployment.write_tenants(**{name: {"webhook_url": url, "webhook_secret_file": str(secret)}
                                for name, url in urls.items()})


def test_a_trickling_receiver_holds_up_no_other_tenants_run_ended_and_its_tries_end_at_the_deadline(tmp_path: Path):
    trickler, receiver = Trickler(hold=90, every=2), Receiver()
    deployment = Deployment(tmp_path)
    _hooked(deployment, acme=trickler.url, beta=receiver.url)
    registry = Registry(tmp_path / "registry.sqlite3")
    acme = [f"20260101-0000{i:02d}-" + f"{i:032x}" for i in range(20)]
    beta = "20260101-000100-" + "b" * 32
    for run_id in acme:
        registry.runs.create(id=run_id, tenant="acme", ask="活", options={}, repo="/r")
    registry.runs.create(id=beta, tenant="beta", ask="活", options={}, repo="/r")

    async def scenario() -> None:
        hooks = Webhooks(registry.deliveries, Tenants(deployment.root / "tenants.toml"), retry_s=60.0)
        await hooks.start()
        try:
            for run_id in acme:  # twenty of acme's runs started: their receiver holds every try it gets
                hooks.emit("run.started", registry.runs.get(run_id))  # type: ignore[arg-type]
            await _until(lambda: trickler.open >= 2, 30, "acme's receiver to hold several tries at once")
            await asyncio.sleep(1)  # acme has taken every slot it may take
            hooks.emit("run.ended", registry.runs.get(beta))  # type: ignore[arg-type]
            await _until(lambda: [g["delivery"] for g in receiver.got] == [f"{beta}.run.ended"], ARRIVES_S,
                         "beta's run.ended while acme's receiver holds its tries")
            assert not [d.id for d in registry.deliveries.list(tenant="acme") if d.attempts], \
                "beta's slot was its own: it did not wait for one of acme's tries to end"
            held = [d.id for d in registry.deliveries.list(tenant="acme", state="pending") if d.attempts == 0
                    and trickler.tries[d.id]]
            tried = lambda: [d for d in registry.deliveries.list(tenant="acme") if d.id in held and d.attempts]  # noqa: E731
            await _until(lambda: len(tried()) == len(held), 30, "acme's held tries to end at their deadline")
        finally:
            await hooks.stop()
        assert all(d.state == "pending" and d.last_status is None and "no answer" in (d.last_error or "")
                   for d in tried()), [(d.state, d.last_status, d.last_error) for d in tried()]

    try:
        asyncio.run(scenario())
    finally:
        registry.close()
        trickler.close()
        receiver.server.shutdown()
    assert all(g["signed"] for g in receiver.got)


RUNS = 20


@pytest.mark.cli
def test_two_replicas_on_postgresql_send_no_try_twice_while_a_receiver_holds_tries_past_their_claim(
        tmp_path: Path, services: list[Service], postgres_url: str):
    """Acme's receiver holds the first try of each delivery 40 s, past a claim's 30 s: neither replica sends a try
    the registry does not count (a try held past its claim used to be sent again by the other replica), and beta's
    run.ended arrives meanwhile. The runs are clarify-only ones whose brief fails its check: they start and end in
    seconds, and how a run ends is no matter to its webhooks."""
    trickler, receiver = Trickler(hold=40, every=1, first_only=True), Receiver()
    deployment = Deployment(tmp_path, quota=RUNS, extra_config=(
        f'database_url = "{postgres_url}"\nwebhook_retry_s = 1\n'))
    _hooked(deployment, acme=trickler.url, beta=receiver.url)
    rules = [Rule(say(BRIEF), system=CLARIFIER, result="Python", repeat=True)]
    with ScriptedModel(rules) as model:
        deployment.set_credentials(model.env)
        replicas = [Service(deployment, name, env={"FLOWER_SERVICE_REPLICA": name}).start(timeout=180)
                    for name in ("r1", "r2")]
        services.extend(replicas)
        runs = []
        for i in range(RUNS):  # submitted to one replica or the other
            with replicas[i % 2].client("acme") as c:
                r = c.post("/v1/runs", json={"ask": f"活 {i}", "options": {"clarify_only": True}})
            assert r.status_code == 201, r.text
            runs.append(r.json()["id"])
        wait_for(lambda: trickler.open >= 2, 120, what="acme's receiver to hold tries")
        with replicas[1].client("beta") as c:
            beta = c.post("/v1/runs", json={"ask": "另一个租户的活", "options": {"clarify_only": True}}).json()["id"]
            wait_status(c, beta, ENDED)
        wait_for(lambda: f"{beta}.run.ended" in {g["delivery"] for g in receiver.got}, ARRIVES_S, every=0.05,
                 what="beta's run.ended while acme's receiver holds its tries")
        with replicas[0].client("acme") as c:
            for run_id in runs:
                wait_status(c, run_id, ENDED, timeout=300)

        def deliveries() -> dict[str, tuple[str, int]]:
            with psycopg.connect(postgres_url) as db:
                rows = db.execute("SELECT id, state, attempts FROM deliveries WHERE tenant = 'acme'").fetchall()
            return {str(i): (str(state), int(attempts)) for i, state, attempts in rows}

        wait_for(lambda: all(s != "pending" for s, _ in deliveries().values()), 300, every=0.5,
                 what="acme's deliveries to end")
        time.sleep(1)  # a second copy of a try would have arrived by now
    final = deliveries()
    trickler.close()
    receiver.server.shutdown()
    assert set(final) == {f"{r}.{e}" for r in runs for e in ("run.started", "run.ended")}
    assert {s for s, _ in final.values()} == {"delivered"}, final
    twice = {i: (trickler.tries[i], attempts) for i, (_, attempts) in final.items() if trickler.tries[i] > attempts}
    assert not twice, f"tries sent that the registry did not count (sent twice): {twice}"
    assert all(trickler.tries[i] >= 1 for i in final)

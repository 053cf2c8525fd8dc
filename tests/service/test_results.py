"""Issue 24, results reach the team: signed webhooks on run started / question asked / run ended, retried with
backoff and logged in the API, and a succeeded run's branch pushed to the tenant's git remote with a credential
only the service holds. Real parts on loopback: the service (``python -m service``), real runs of the bundled CLI
against the scripted model, a webhook receiver that checks every signature, and a git server (``git
http-backend`` behind HTTP basic auth)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import sqlite3
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from _hello import hello_rules
from _service_helpers import Deployment, Service, git, serve, wait_for, wait_question, wait_status
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ACHIEVED, BRIEF, CLARIFIER, GOAL, JUDGE, LEAD, REPORT
from service.clock import ManualClock
from service.errors import RegistryDamaged, TenantError
from service.registry import Delivery, Registry
from service.tenants import Tenants
from service.results.webhooks import Webhooks

SECRET = "hook-secret-5f0c2a9e71d84b36"
USER = "flower-bot"
TOKEN = "push-token-9d1e6b2c7a4f8035"
WRONG = "push-token-not-the-right-one"
ENDED = ("succeeded", "failed", "aborted", "killed", "cancelled")


# -- the team's side: a webhook receiver and a git server, both real HTTP servers on 127.0.0.1 -------------------
class Receiver:
    """Records every POST in the order it is answered, with whether its signature verifies; ``answers`` scripts the
    statuses answered to an event's deliveries (each try takes the next one; then 200). A try of an event in
    ``held`` that would be answered 200 waits until ``gate`` is set (``arrived`` counts it meanwhile)."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.answers: dict[str, list[int]] = {}
        self.held: set[str] = set()
        self.gate = threading.Event()
        self.arrived: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                want = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                doc = json.loads(body)
                receiver.arrived.append(doc["event"])
                script = receiver.answers.get(doc["event"], [])
                code = script.pop(0) if script else 200
                if code == 200 and doc["event"] in receiver.held:
                    receiver.gate.wait(60)
                receiver.got.append({"event": self.headers["X-Flower-Event"], "delivery": self.headers[
                    "X-Flower-Delivery"], "signed": hmac.compare_digest(want, self.headers.get(
                        "X-Flower-Signature-256", "")), "body": doc})
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/flower"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, run_id: str) -> list[dict[str, Any]]:
        return [g for g in self.got if g["body"]["run"] == run_id]


class GitServer:
    """``git http-backend`` (smart HTTP, push enabled for the authenticated user) behind basic auth."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.refused = 0
        root.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "--bare", str(root / "acme.git")], check=True)
        server = self
        expected = "Basic " + base64.b64encode(f"{USER}:{TOKEN}".encode()).decode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._cgi()

            def do_POST(self) -> None:
                self._cgi()

            def _cgi(self) -> None:
                if self.headers.get("Authorization") != expected:
                    server.refused += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path, _, query = self.path.partition("?")
                env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": str(server.root), "GIT_HTTP_EXPORT_ALL": "1",
                       "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "PATH_INFO": path,
                       "QUERY_STRING": query, "REQUEST_METHOD": self.command, "REMOTE_USER": USER,
                       "REMOTE_ADDR": "127.0.0.1", "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                       "CONTENT_LENGTH": str(len(body)),
                       "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", "")}
                out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
                head, _, payload = out.partition(b"\r\n\r\n")
                headers = [line.split(": ", 1) for line in head.decode().split("\r\n") if ": " in line]
                status = next((int(v.split()[0]) for k, v in headers if k.lower() == "status"), 200)
                self.send_response(status)
                for k, v in headers:
                    if k.lower() != "status":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/acme.git"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def branch(self, name: str) -> str | None:
        found = subprocess.run(["git", "-C", str(self.root / "acme.git"), "rev-parse", "--verify", "-q",
                                f"refs/heads/{name}"], capture_output=True, text=True)
        return found.stdout.strip() or None


def prying_rules(ask: str, script: str) -> list[Rule]:
    """A run whose worker (as a prompt-injected one would) runs ``script`` in Bash, then commits what it made."""
    task = f"WORKER-TASK {ask}"
    return [Rule(say(BRIEF.replace("做一个 hello.py", ask)), system=CLARIFIER, prompt=ask),
            Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
            Rule(tool("Agent", {"description": "do it", "prompt": task, "subagent_type": "coder",
                                "run_in_background": False}), system=LEAD, agent=False, prompt=ask),
            Rule(tool("Bash", {"command": script, "description": "work"}), agent=True, prompt=task),
            Rule(say(REPORT), agent=True, prompt=task, result="PROBE-DONE"),
            Rule(say("完成"), system=LEAD, agent=False, result="写好了"),
            Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了")]


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[Receiver, GitServer]]:
    receiver, server = Receiver(), GitServer(tmp_path / "git-server")
    yield receiver, server
    for s in (receiver.server, server.server):
        s.shutdown()
        s.server_close()


@pytest.mark.cli
def test_webhooks_arrive_signed_in_order_with_retries_and_the_branch_is_pushed_with_a_credential_the_run_never_sees(
        tmp_path: Path, services: list[Service], team: tuple[Receiver, GitServer]):
    receiver, gitserver = team
    dep = Deployment(tmp_path, extra_config="webhook_retry_s = 0.05\n")
    secrets = tmp_path / "secrets"
    (secrets / "acme.hook").write_text(SECRET + "\n")
    push_creds = secrets / "acme.push"
    push_creds.write_text(f"username={USER}\ntoken={WRONG}\n")  # the operator's typo, fixed below
    dep.write_tenants(acme={"webhook_url": receiver.url, "webhook_secret_file": str(secrets / "acme.hook"),
                            "push_url": gitserver.url, "push_credentials_file": str(push_creds)})
    seen: list[str] = []  # every API answer's text
    first_ask, second_ask, prying = "做一个 hello 程序", "再做一个 hello 程序", "看看能拿到什么"
    pry = (f"cat {push_creds} {secrets / 'acme.hook'} > leak.txt 2>&1; ls -la {secrets} >> leak.txt 2>&1; "
           "echo PROBE-DONE")
    with ScriptedModel(hello_rules(first_ask) + hello_rules(second_ask) + prying_rules(prying, pry)) as model:
        service = serve(dep, services, model)
        acme = service.client("acme")

        # run 1: the receiver fails `run.started` twice, and holds the third try until the run's question is queued
        # (so the question waits behind it); the push credential is wrong
        receiver.answers["run.started"] = [500, 503]
        receiver.held = {"run.started"}
        r = acme.post("/v1/runs", json={"ask": first_ask, "options": {"rounds": 1}})
        assert r.status_code == 201, r.text
        one = r.json()["id"]
        q = wait_question(acme, one)

        def queued() -> dict[str, Any] | None:
            log = acme.get("/v1/webhooks/deliveries").json()["deliveries"]
            return next((d for d in log if d["run"] == one and d["event"] == "question.asked"), None)

        wait_for(lambda: receiver.arrived.count("run.started") == 3, 60, what="the third try of run.started")
        waiting = wait_for(queued, 60, what="the question's delivery to be queued")
        assert waiting["state"] == "pending" and waiting["attempts"] == 0, waiting  # behind run.started, in flight
        receiver.gate.set()
        assert acme.post(f"/v1/runs/{one}/answers", json={"question_id": q["id"], "text": "1"}).status_code == 200
        first = wait_status(acme, one, ENDED)
        seen.append(json.dumps(first))
        assert first["status"] == "succeeded", first
        ended = wait_for(lambda: [g for g in receiver.of(one) if g["event"] == "run.ended"], 60,
                         what="run.ended of the first run")[0]

        # signed, in order, the started delivery tried three times under one delivery id
        got = receiver.of(one)
        assert all(g["signed"] for g in receiver.got), [g for g in receiver.got if not g["signed"]]
        assert [g["event"] for g in got] == ["run.started"] * 3 + ["question.asked", "run.ended"], got
        assert len({g["delivery"] for g in got[:3]}) == 1 and got[0]["body"]["id"] == got[0]["delivery"]
        asked = got[3]["body"]
        assert asked["question"]["text"] == f"{first_ask} 用什么语言?" and asked["question"]["options"] == [
            "Python", "Go"] and asked["question"]["id"] == q["id"] and asked["status"] == "running"
        body = ended["body"]
        assert body["status"] == "succeeded" and body["branch"] == f"flower/{one}" and body["commit"] == first["commit"]
        assert body["pushed"] is False and body["push"]["state"] == "failed", body
        assert body["tenant"] == "acme" and body["created"] and body["started"] and body["ended"]

        # a failed push leaves the run succeeded and names why, without the credential; nothing reached the server
        row = acme.get(f"/v1/runs/{one}").json()
        seen.append(json.dumps(row))
        assert row["status"] == "succeeded" and row["push"]["state"] == "failed", row
        assert "Authentication failed" in row["push"]["error"] and gitserver.url in row["push"]["error"], row["push"]
        assert gitserver.refused and gitserver.branch(f"flower/{one}") is None

        # the delivery log in the API: three tries of run.started, the last one a 200
        log = acme.get("/v1/webhooks/deliveries")
        seen.append(log.text)
        assert log.status_code == 200, log.text
        mine = {d["event"]: d for d in log.json()["deliveries"] if d["run"] == one}
        assert mine["run.started"]["attempts"] == 3 and mine["run.started"]["last_status"] == 200
        assert mine["run.started"]["state"] == "delivered" and mine["run.ended"]["state"] == "delivered"
        assert service.client("beta").get("/v1/webhooks/deliveries").json() == {"deliveries": []}

        # the operator fixes the credential; the retry over the API pushes the run's commit
        push_creds.write_text(f"username={USER}\ntoken={TOKEN}\n")
        again = acme.post(f"/v1/runs/{one}/push")
        seen.append(again.text)
        assert again.status_code == 200 and again.json()["state"] == "pushed", again.text
        assert gitserver.branch(f"flower/{one}") == first["commit"]
        assert acme.get(f"/v1/runs/{one}").json()["push"]["attempts"] == 2

        # run 2: pushed as it ends; a 4xx from the receiver is not retried, and the next event still goes out
        receiver.answers["question.asked"] = [410]
        r = acme.post("/v1/runs", json={"ask": second_ask, "options": {"rounds": 1}})
        two = r.json()["id"]
        q2 = wait_question(acme, two)
        assert acme.post(f"/v1/runs/{two}/answers", json={"question_id": q2["id"], "text": "1"}).status_code == 200
        second = wait_status(acme, two, ENDED)
        assert second["status"] == "succeeded", second
        ended2 = wait_for(lambda: [g for g in receiver.of(two) if g["event"] == "run.ended"], 60,
                          what="run.ended of the second run")[0]["body"]
        assert ended2["pushed"] is True and ended2["push"]["ref"] == f"refs/heads/flower/{two}", ended2
        assert [g["event"] for g in receiver.of(two)] == ["run.started", "question.asked", "run.ended"]
        assert gitserver.branch(f"flower/{two}") == second["commit"]
        pushed = git(dep.repos["acme"], "rev-parse", f"flower/{two}").strip()
        assert pushed == second["commit"]
        shown = subprocess.run(["git", "-C", str(gitserver.root / "acme.git"), "show", f"flower/{two}:hello.py"],
                               capture_output=True, text=True).stdout
        assert shown == "print('hello')\n"
        log2 = {d["event"]: d for d in acme.get("/v1/webhooks/deliveries").json()["deliveries"] if d["run"] == two}
        assert log2["question.asked"]["state"] == "failed" and log2["question.asked"]["attempts"] == 1
        assert log2["question.asked"]["last_status"] == 410 and "410" in log2["question.asked"]["last_error"]
        seen.append(json.dumps(acme.get(f"/v1/runs/{two}").json()))

        # run 3: a worker goes looking for the push credential and the webhook secret; what it found is pushed
        r = acme.post("/v1/runs", json={"ask": prying, "options": {"rounds": 1}})
        three = r.json()["id"]
        third = wait_status(acme, three, ENDED)
        assert third["status"] == "succeeded", third
        wait_for(lambda: gitserver.branch(f"flower/{three}"), 60, what="the prying run's branch to be pushed")
        found = subprocess.run(["git", "-C", str(gitserver.root / "acme.git"), "show", f"flower/{three}:leak.txt"],
                               capture_output=True, text=True).stdout
        assert found.count("No such file") == 3, found  # it ran, and none of the files (nor their folder) is there
        assert TOKEN not in found and SECRET not in found and USER not in found, found

    # the credentials appear in no log line, no API answer, nothing of the runs' folders
    logged = service.log_path.read_bytes()
    for secret in (TOKEN, WRONG, SECRET):
        assert secret.encode() not in logged, f"{secret} reached the service log"
        assert not any(secret in text for text in seen), f"{secret} reached an API answer"
    for folder in (dep.data / "runs").iterdir():
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                assert TOKEN.encode() not in data and WRONG.encode() not in data, path
    assert any(line.get("event") == "run.pushed" and line.get("run") == two for line in service.lines())


# -- the tenants file and the registry (no service) --------------------------------------------------------------
def _tenants(tmp_path: Path, **settings: str) -> Tenants:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    lines = ["[[tenant]]", 'name = "acme"', f'token = "{"t" * 20}"', f'repo = "{repo}"', 'credentials = "a.env"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    path = tmp_path / "tenants.toml"
    path.write_text("\n".join(lines) + "\n")
    return Tenants(path)


@pytest.mark.parametrize(("settings", "says"), [
    ({"webhook_url": "https://hooks.example/x"}, "sets `webhook_url` without `webhook_secret_file`"),
    ({"push_credentials_file": "p"}, "sets `push_credentials_file` without `push_url`"),
    ({"webhook_url": "ftp://hooks.example/x", "webhook_secret_file": "h"}, "must be an http:// or https:// URL"),
    ({"webhook_url": "https://bot:pw@hooks.example/x", "webhook_secret_file": "h"}, "holds a user name or password"),
    ({"push_url": "http://git.example/acme.git", "push_credentials_file": "p"}, "travel in the clear; use https"),
    ({"webhook_secret": "s3cret"}, "a secret never goes in the tenants file"),
    ({"push_token": "s3cret"}, "name that file in `push_credentials_file`"),
])
def test_webhook_and_push_settings_are_checked_with_a_sentence(tmp_path: Path, settings: dict[str, str], says: str):
    with pytest.raises(TenantError) as e:
        _tenants(tmp_path, **settings)
    assert says in str(e.value) and "s3cret" not in str(e.value), str(e.value)
    assert str(e.value).count("\n") == 0


def test_webhook_and_push_settings_resolve_beside_the_tenants_file(tmp_path: Path):
    tenant = _tenants(tmp_path, webhook_url="http://127.0.0.1:9/h", webhook_secret_file="acme.hook",
                      push_url="http://127.0.0.1:9/acme.git", push_credentials_file="acme.push").all()[0]
    assert tenant.webhook is not None and tenant.webhook.secret_file == str(tmp_path / "acme.hook")
    assert tenant.push is not None and tenant.push.credentials_file == str(tmp_path / "acme.push")


def test_the_registry_keeps_deliveries_and_refuses_one_naming_another_tenants_run(tmp_path: Path):
    path = tmp_path / "registry.sqlite3"
    registry = Registry(path)
    run_id = "20260101-000000-" + "a" * 32
    registry.runs.create(id=run_id, tenant="acme", ask="活", options={}, repo="/r")
    d = Delivery(id=f"{run_id}.run.started", tenant="acme", run=run_id, event="run.started", body=b"{}", created=1.0)
    assert registry.deliveries.add(d) and not registry.deliveries.add(d)  # one event is queued once
    assert [x.id for x in registry.deliveries.list(tenant="acme")] == [d.id] and registry.deliveries.list(tenant="beta") == []
    registry.close()
    Registry(path).close()  # ours: it opens again
    db = sqlite3.connect(path)
    db.execute("UPDATE deliveries SET tenant = 'beta'")
    db.commit()
    db.close()
    with pytest.raises(RegistryDamaged, match="not a run of that tenant"):
        Registry(path)


async def _send_with_two_replicas(registry_a: Registry, registry_b: Registry, tenants: Tenants,
                                  receiver: Receiver, runs: list[str]) -> None:
    senders = [Webhooks(r.deliveries, tenants, retry_s=0.05) for r in (registry_a, registry_b)]
    for s in senders:
        await s.start()
    try:
        for i, run_id in enumerate(runs):  # each event queued by one replica or the other, as the scheduler would
            run = registry_a.runs.get(run_id)
            assert run is not None
            for event in ("run.started", "run.ended"):
                senders[i % 2].emit(event, run)  # type: ignore[arg-type]
                senders[(i + 1) % 2].wake()
        await asyncio.wait_for(_until(lambda: len(registry_a.deliveries.list(state="delivered")) == 2 * len(runs)), 60)
        await asyncio.sleep(0.5)  # a second copy of any of them would have arrived by now
    finally:
        for s in senders:
            await s.stop()


async def _until(done: Callable[[], bool]) -> None:
    while not done():
        await asyncio.sleep(0.02)


def test_two_replicas_on_one_registry_send_each_webhook_once_and_in_order(tmp_path: Path, postgres_url: str):
    receiver = Receiver()
    receiver.answers["run.started"] = [503] * 10  # ten tries answered 503: retried, by whichever replica
    (tmp_path / "acme.hook").write_text(SECRET)
    tenants = _tenants(tmp_path, webhook_url=receiver.url, webhook_secret_file="acme.hook")
    a, b = Registry.postgres(postgres_url), Registry.postgres(postgres_url)
    runs = [f"20260101-00000{i % 10}-" + f"{i:032x}" for i in range(20)]
    for run_id in runs:
        a.runs.create(id=run_id, tenant="acme", ask="活", options={}, repo="/r")
    try:
        asyncio.run(_send_with_two_replicas(a, b, tenants, receiver, runs))
    finally:
        a.close()
        b.close()
        receiver.server.shutdown()
    tries = Counter(g["delivery"] for g in receiver.got)
    assert set(tries) == {f"{r}.{e}" for r in runs for e in ("run.started", "run.ended")}
    assert all(tries[f"{r}.run.ended"] == 1 for r in runs), "a delivery answered 200 at once was sent once"
    assert sum(tries[f"{r}.run.started"] for r in runs) == len(runs) + 10, "one more try for each 503, no other"
    assert all(g["signed"] for g in receiver.got)
    for run_id in runs:  # a run's deliveries in order, whichever replica sent each: started (each try) then ended
        events = [g["event"] for g in receiver.of(run_id)]
        assert events[-1] == "run.ended" and set(events[:-1]) == {"run.started"}, events


T2031 = 1925078399.0  # 2031-01-01 23:59:59 UTC: a wall time no test runs at, so a sender reading time.time() shows


async def test_a_failed_webhook_is_tried_again_on_the_services_clock_after_retry_s_then_twice_that(tmp_path: Path):
    """The retry schedule is read on the clock the sender is handed: with a ``ManualClock`` the second try is due
    exactly ``retry_s`` after the first failed and the third ``2 · retry_s`` after the second — and nothing is tried
    before it is due, however long the test takes (no sleeping for the schedule)."""
    receiver = Receiver()
    receiver.answers["run.ended"] = [503, 503]  # two failures, then 200
    (tmp_path / "acme.hook").write_text(SECRET + "\n")
    tenants = _tenants(tmp_path, webhook_url=receiver.url, webhook_secret_file="acme.hook")
    registry = Registry(tmp_path / "registry.sqlite3")
    run_id = "20310101-235959-" + "b" * 32
    registry.runs.create(id=run_id, tenant="acme", ask="活", options={}, repo="/r")
    run = registry.runs.get(run_id)
    assert run is not None
    clock = ManualClock(T2031)
    hooks = Webhooks(registry.deliveries, tenants, retry_s=60.0, clock=clock)

    def tried(n: int) -> Delivery:
        return next(d for d in registry.deliveries.list(tenant="acme") if d.attempts == n)

    async def tries(n: int) -> Delivery:
        await asyncio.wait_for(_until(lambda: any(d.attempts == n for d in registry.deliveries.list(tenant="acme"))), 30)
        return tried(n)

    await hooks.start()
    try:
        hooks.emit("run.ended", run)
        first = await tries(1)
        assert first.created == T2031 and first.last_status == 503 and first.next_try == T2031 + 60
        clock.advance(59.9)
        hooks.wake()
        await asyncio.sleep(0.2)  # a pass of the sender: nothing is due yet
        assert receiver.arrived == ["run.ended"] and tried(1).state == "pending"
        clock.advance(0.1)
        hooks.wake()
        second = await tries(2)
        assert second.next_try == T2031 + 60 + 120, "then twice retry_s"
        clock.advance(120)
        hooks.wake()
        third = await tries(3)
        assert third.state == "delivered" and third.ended == T2031 + 180 and receiver.arrived == ["run.ended"] * 3
    finally:
        await hooks.stop()
        receiver.server.shutdown()
        receiver.server.server_close()
        registry.close()

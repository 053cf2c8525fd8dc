"""Egress by allow-list from inside real runs: submitted over the API, the scripted model makes each run's worker
try every way out with Bash, through the real CLI, on the local (bubblewrap) and the Docker backend. acme lists
two registries (one GET/HEAD only); beta has the default, ``none``. What acme's run may reach it reaches through the
runner's proxy variables; every other attempt is refused by squid and audited with the run's id; beta's run has no
proxy, no socket, no name resolution and reaches nothing."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from _egress import hosts_file, registries  # noqa: E402
from _hostile import DONE, ENDED, hostile_deployment, worker_rules  # noqa: E402
from _service_helpers import SCRAPE, Service, scrape_config, wait_status  # noqa: E402
from flower.testing import ScriptedModel  # noqa: E402

pytestmark = pytest.mark.cli

PROBE = r'''
import json, os, socket, sys, urllib.error, urllib.request
P, P2, SERVICE, MODEL = (int(x) for x in sys.argv[1:5])
run_dir = os.path.dirname(os.path.dirname(os.environ["FLOWER_ENV"]))
out = {"proxy": os.environ.get("HTTPS_PROXY", ""), "socket": os.path.exists(os.path.join(run_dir, "gateway",
       "egress.sock"))}

def fetch(url, method="GET", data=None, headers=None):
    try:
        return urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers or {}),
                                      timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return type(e).__name__

def raw(request, then=b""):
    """Through the proxy by hand, as an attacker would (NO_PROXY and the tools' own rules set aside)."""
    if not out["proxy"]:
        return "no proxy"
    host, port = out["proxy"].removeprefix("http://").rsplit(":", 1)
    try:
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(request)
        answer = s.recv(65536)
        if then and answer.startswith(b"HTTP/1.1 200"):
            s.sendall(then)
            answer = s.recv(65536)
        return answer.split(b"\r\n")[0].decode()
    except Exception as e:
        return type(e).__name__

def resolve(name):
    try:
        return socket.getaddrinfo(name, 80)[0][4][0]
    except Exception as e:
        return type(e).__name__

def direct(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return "connected"
    except Exception as e:
        return type(e).__name__

listed = f"registry.flower.test:{P}"
out["listed"] = fetch(f"http://{listed}/simple/left-pad/")
out["readonly_get"] = fetch(f"http://readonly.flower.test:{P}/simple/")
out["readonly_post"] = fetch(f"http://readonly.flower.test:{P}/upload", "POST", b"secret")
out["unlisted"] = fetch(f"http://other.flower.test:{P}/")
out["other_port"] = fetch(f"http://registry.flower.test:{P2}/")
out["ip_literal"] = raw(f"GET http://127.0.0.1:{P}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
out["ip_tunnel"] = raw(f"CONNECT 127.0.0.1:{P} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
out["service_port"] = raw(f"CONNECT registry.flower.test:{SERVICE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
out["model_port"] = raw(f"CONNECT registry.flower.test:{MODEL} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
out["websocket"] = raw(f"GET http://{listed}/ws HTTP/1.1\r\nHost: {listed}\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
                       "dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".encode())
out["mismatch"] = raw(f"CONNECT {listed} HTTP/1.1\r\nHost: {listed}\r\n\r\n".encode(),
                      b"GET /mismatch HTTP/1.1\r\nHost: other.flower.test\r\n\r\n")
out["upload"] = raw(f"POST http://{listed}/upload HTTP/1.1\r\nHost: {listed}\r\nContent-Length: 2097152\r\n\r\n"
                    .encode() + b"x" * 1024)  # a body over squid's cap (1 MB): answered on its declared size
out["tunnel_upload"] = raw(f"CONNECT {listed} HTTP/1.1\r\nHost: {listed}\r\n\r\n".encode(),  # past the run's cap
                           b"PUT /big HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n" + b"x" * (2 << 20))
out["after_cap"] = fetch(f"http://{listed}/simple/")
out["dns"] = resolve("registry.flower.test")
out["dns_public"] = resolve("pypi.org")
out["direct"] = direct(P)
print("EGRESS " + json.dumps(out, sort_keys=True))
'''


def probe_script(registry: int, other: int, service: int, model: int) -> str:
    return (f"set +e\ncat > /tmp/probe.py <<'PYEOF'\n{PROBE}\nPYEOF\n"
            f"python3 /tmp/probe.py {registry} {other} {service} {model}\necho {DONE}")


def results(model: ScriptedModel, ask: str) -> dict[str, object]:
    """The probe's line in the tool result of the run asking ``ask``."""
    for req in model.conversation:
        for r in req.results:
            found = re.search(r"EGRESS (\{.*\})", r["text"])
            if found and ask in json.dumps(req.body, ensure_ascii=False):
                return dict(json.loads(found.group(1)))
    raise AssertionError(f"no probe output for {ask!r}")


def test_a_run_reaches_only_its_allow_list_and_every_other_attempt_is_audited(tmp_path: Path, services: list[Service],
                                                                               backend_name: str) -> None:
    hosts = hosts_file(tmp_path)
    with registries(2) as (registry, other):
        dep = hostile_deployment(tmp_path / "dep", backend_name)
        with dep.config.open("a") as f:
            f.write(f'egress_internal = ["127.0.0.1/32"]\negress_hosts_file = "{hosts}"\n'
                    f"egress_max_upload_mb = 1\n{scrape_config(tmp_path)}")
        dep.write_tenants(acme={"egress": [f"registry.flower.test:{registry.port}"]})
        tenants = (dep.root / "tenants.toml").read_text()  # the methods rule as a TOML inline table
        tenants = tenants.replace(f'egress = ["registry.flower.test:{registry.port}"]',
                                  f'egress = ["registry.flower.test:{registry.port}", {{host = '
                                  f'"readonly.flower.test:{registry.port}", methods = ["GET", "HEAD"]}}]')
        (dep.root / "tenants.toml").write_text(tenants)
        with ScriptedModel([]) as model:
            service = Service(dep)
            dep.set_credentials(model.env)
            service.start(timeout=600)  # the first Docker test of a tree builds the sandbox image
            services.append(service)
            port, model_port = int(service.url.rsplit(":", 1)[1]), int(model.url.rsplit(":", 1)[1])
            script = probe_script(registry.port, other.port, port, model_port)
            model.rules.extend(worker_rules("出去看看", script) + worker_rules("不许出去", script))
            acme, beta = service.client("acme"), service.client("beta")
            options = {"rounds": 1, "timeout_s": 120}
            run_a = acme.post("/v1/runs", json={"ask": "出去看看", "options": options}).json()["id"]
            run_b = beta.post("/v1/runs", json={"ask": "不许出去", "options": options}).json()["id"]
            final_a = wait_status(acme, run_a, ENDED, timeout=300)
            final_b = wait_status(beta, run_b, ENDED, timeout=300)
            metrics = acme.get("/metrics", headers=SCRAPE).text
            lines = service.lines()
    assert final_a["status"] == "succeeded" and final_b["status"] == "succeeded", (final_a, final_b)
    a, b = results(model, "出去看看"), results(model, "不许出去")

    # acme: what is listed is reached, the rest refused at the proxy; no name resolves and no route leads out
    assert a["socket"] is True and str(a["proxy"]).startswith("http://127.0.0.1:")
    assert (a["listed"], a["readonly_get"]) == (200, 200), a
    assert (a["readonly_post"], a["unlisted"], a["other_port"]) == (403, 403, 403)
    assert a["ip_literal"] == a["ip_tunnel"] == a["service_port"] == a["model_port"] == "HTTP/1.1 403 Forbidden", a
    assert a["websocket"] == "HTTP/1.1 403 Forbidden", a
    assert a["upload"] == "HTTP/1.1 413 Payload Too Large", a
    assert a["tunnel_upload"] in ("", "ConnectionResetError", "BrokenPipeError"), a
    assert a["after_cap"] in ("RemoteDisconnected", "URLError", "ConnectionResetError"), "a run past its cap is cut"
    assert a["mismatch"] == "HTTP/1.1 200 OK", "squid cannot see inside a tunnel: the listed host alone answers"
    assert a["dns"] == a["dns_public"] == "gaierror" and a["direct"] == "ConnectionRefusedError", a
    assert sorted((m, p) for m, p, _, _ in registry.seen) == [("GET", "/mismatch"), ("GET", "/simple/"),
                                                              ("GET", "/simple/left-pad/"), ("PUT", "/big")]
    big = next(size for m, _, _, size in registry.seen if m == "PUT")
    assert big < 1 << 20, "the tunnel was cut at the run's cap: less than the cap of its body came through"
    assert other.seen == []

    # beta: nothing at all
    assert b["socket"] is False and b["proxy"] == "", b
    for key in ("listed", "readonly_get", "unlisted", "other_port", "after_cap"):
        assert b[key] == "URLError", (key, b)
    assert b["ip_literal"] == "no proxy" and b["dns"] == "gaierror" and b["direct"] == "ConnectionRefusedError", b

    # the audit: each request squid saw, with its run; none of beta's
    allowed = [x for x in lines if x.get("event") == "audit.egress"]
    refused = [x for x in lines if x.get("event") == "audit.egress_refused"]
    assert {x["run"] for x in allowed + refused} == {run_a}
    assert sorted((x["method"], x["host"]) for x in allowed) == [  # the two tunnels: the mismatch, the upload
        ("CONNECT", "registry.flower.test"), ("CONNECT", "registry.flower.test"), ("GET", "readonly.flower.test"),
        ("GET", "registry.flower.test")]
    denied = {(x.get("method"), x.get("host"), x.get("port"), x.get("status")) for x in refused}
    for attempt in [("POST", "readonly.flower.test", registry.port, 403),
                    ("GET", "other.flower.test", registry.port, 403),
                    ("GET", "registry.flower.test", other.port, 403),
                    ("GET", "127.0.0.1", registry.port, 403), ("CONNECT", "127.0.0.1", registry.port, 403),
                    ("CONNECT", "registry.flower.test", port, 403),
                    ("CONNECT", "registry.flower.test", model_port, 403),
                    ("GET", "registry.flower.test", registry.port, 403),  # the websocket
                    ("POST", "registry.flower.test", registry.port, 413)]:
        assert attempt in denied, (attempt, denied)
    cut = [x for x in refused if x.get("reason") == "upload_cap"]
    assert len(cut) == 1 and cut[0]["bytes_up"] > 1 << 20, refused
    assert all(x["bytes_up"] > 0 and x["tenant"] == "acme" for x in allowed + refused)
    assert all(x.get("error") == "ERR_ACCESS_DENIED" for x in refused if x.get("status") == 403)
    assert re.search(r'flower_egress_requests_total\{decision="allowed",tenant="acme"\} 4\.0', metrics), metrics
    assert re.search(r'flower_egress_requests_total\{decision="refused",tenant="acme"\} (\d+)', metrics)
    assert 'tenant="beta"' not in "\n".join(x for x in metrics.splitlines() if x.startswith("flower_egress"))

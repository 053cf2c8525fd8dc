"""Issue 21, items 10 and 12, through the real service: a tenant's cap of event streams holds when its opens come
all at once (the count was checked in the handler but taken only when the stream's body started: 21 of 40 got
through a cap of 4), and every slot comes back, a stream cut before its body started included. The web page
carries a Content-Security-Policy and still works under it in a real headless Chromium, and a page of another
origin cannot frame it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from _service_helpers import SCRAPE, TOKENS, Deployment, Service, scrape_config, wait_for, wait_question
from flower.testing import Rule, ScriptedModel, tool
from sandbox.testing import ASK, CLARIFIER

pytestmark = pytest.mark.cli

CAP = 4
CSP = "Content Security Policy"  # how Chromium's console names a violation of it


@pytest.fixture(scope="module")
def waiting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    """One service (a cap of 4 streams per tenant) and one run of acme's that waits on its question throughout."""
    rules = [Rule(tool(ASK, {"question": "等着"}), system=CLARIFIER, repeat=True)]
    with ScriptedModel(rules) as model:
        root = tmp_path_factory.mktemp("streams")
        dep = Deployment(root, env=model.env, extra_config=f"max_streams_per_tenant = {CAP}\n{scrape_config(root)}")
        service = Service(dep).start()
        try:
            acme = service.client("acme")
            r = acme.post("/v1/runs", json={"ask": "一个会一直等的活", "options": {"clarify_only": True}})
            assert r.status_code == 201, r.text
            wait_question(acme, r.json()["id"])
            yield service, r.json()["id"]
        finally:
            service.stop()
            from _service_helpers import end_leftover_runs

            end_leftover_runs(dep.data / "runs")


def _send_open(url: str, run_id: str) -> socket.socket:
    """A raw connection that has sent its request for acme's event stream (nothing read yet)."""
    where = urlsplit(url)
    s = socket.create_connection((where.hostname, where.port), timeout=30)
    s.sendall(f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {where.netloc}\r\n"
              f"Authorization: Bearer {TOKENS['acme']}\r\nAccept: text/event-stream\r\n\r\n".encode())
    return s


def _status(s: socket.socket) -> int:
    head = b""
    while b"\r\n" not in head:
        chunk = s.recv(1)
        assert chunk, f"the connection closed before a status line: {head!r}"
        head += chunk
    return int(head.split()[1])


def _open_streams(url: str) -> int:
    text = httpx.get(f"{url}/metrics", headers=SCRAPE).text
    found = re.search(r'^flower_sse_streams\{tenant="acme"\} ([0-9.]+)$', text, re.M)
    return int(float(found.group(1))) if found else 0


def _cut(s: socket.socket) -> None:
    """Close with a reset: the service sees the client gone at once."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()


def test_forty_opens_at_once_get_exactly_the_cap_and_every_slot_comes_back(waiting: tuple[Service, str]):
    service, run_id = waiting
    opens = [_send_open(service.url, run_id) for _ in range(40)]  # every request is out before any is answered
    statuses = [_status(s) for s in opens]
    assert sorted(statuses) == [200] * CAP + [429] * (40 - CAP), f"{statuses.count(200)} of 40 streams opened"
    assert _open_streams(service.url) == CAP
    for s in opens:
        _cut(s)
    wait_for(lambda: _open_streams(service.url) == 0, what="the closed streams to be given back")

    # clients gone before the body started: each took a slot in the handler, and gave it back
    for _ in range(3 * CAP):
        _cut(_send_open(service.url, run_id))
    wait_for(lambda: _open_streams(service.url) == 0, what="the cut streams to be given back")
    again = [_send_open(service.url, run_id) for _ in range(CAP)]
    assert [_status(s) for s in again] == [200] * CAP, "the cap is whole again"
    one_more = _send_open(service.url, run_id)
    assert _status(one_more) == 429
    for s in [*again, one_more]:
        _cut(s)
    wait_for(lambda: _open_streams(service.url) == 0, what="the streams to be given back")


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium whose console log the test reads (CSP violations are reported there)."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        if os.environ.get("FLOWER_REQUIRE_BROWSER") == "1":
            pytest.fail("FLOWER_REQUIRE_BROWSER=1 but chromium/chromedriver are not installed "
                        "(apt-get install chromium chromium-driver)")
        pytest.skip("no chromium + chromedriver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=DriverService(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _until(driver: Any, fn: Any, what: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 60, poll_frequency=0.2).until(fn, message=f"timed out waiting for {what}")


def _console(driver: Any) -> list[str]:
    return [str(entry.get("message", "")) for entry in driver.get_log("browser")]


class _Framer(BaseHTTPRequestHandler):
    """Another origin's page that tries to show the service's page in a frame."""

    target = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = f'<!doctype html><title>framer</title><iframe id="f" src="{self.target}/"></iframe>'.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def framer(waiting: tuple[Service, str]) -> Iterator[str]:
    """A second HTTP server on loopback (another port: another origin) serving the framing page; its URL."""
    handler = type("Framer", (_Framer,), {"target": waiting[0].url})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_the_page_its_assets_and_the_api_say_how_a_browser_must_treat_them(waiting: tuple[Service, str]):
    service, run_id = waiting
    acme = service.client("acme")
    for path in ("/", "/app.js", "/app.css", "/v1/runs", f"/v1/runs/{run_id}", "/healthz", "/no-such-page"):
        r = acme.get(path)
        assert r.status_code in (200, 404), (path, r.status_code)
        assert r.headers.get("x-frame-options") == "DENY", path
        assert r.headers.get("x-content-type-options") == "nosniff", path
        assert r.headers.get("referrer-policy") == "no-referrer", path
        policy = {d.split()[0]: d.split()[1:] for d in r.headers.get("content-security-policy", "").split("; ") if d}
        assert policy.get("default-src") == ["'self'"] and policy.get("frame-ancestors") == ["'none'"], (path, policy)
        assert policy.get("base-uri") == ["'none'"] and "'unsafe-inline'" not in str(policy), (path, policy)
    docs = acme.get("/schema/swagger")  # the docs page: the page's policy, data: images allowed for its icons
    assert docs.status_code == 200 and "frame-ancestors 'none'" in docs.headers["content-security-policy"]
    assert "script-src 'self';" in docs.headers["content-security-policy"]
    assert docs.headers["x-frame-options"] == "DENY"


def test_the_page_works_under_its_policy_and_another_origin_cannot_frame_it(
        waiting: tuple[Service, str], browser: Any, framer: str):
    service, run_id = waiting
    driver = browser
    driver.get(service.url + "/")
    _until(driver, lambda d: d.find_element("id", "token").is_displayed(), "the sign-in form")
    driver.find_element("id", "token").send_keys(TOKENS["acme"])
    driver.find_element("id", "signin-btn").click()
    _until(driver, lambda d: d.find_elements("css selector", f"#runs li[data-id='{run_id}']"), "the run in the list")
    driver.find_element("css selector", f"#runs li[data-id='{run_id}']").click()
    _until(driver, lambda d: d.find_elements("css selector", "#questions .question"), "the run's question")
    _until(driver, lambda d: "等着" in d.find_element("id", "events").text, "the run's events over the stream")
    assert driver.find_element("id", "new-ask").is_displayed()
    assert not [m for m in _console(driver) if CSP in m], "the page itself breaks no rule of its policy"

    # the policy is in force: a script written into the page is refused, and the console says so
    driver.execute_script("const s = document.createElement('script'); s.textContent = 'window.injected = 1';"
                          "document.head.appendChild(s)")
    assert driver.execute_script("return window.injected") is None
    assert [m for m in _console(driver) if CSP in m and "inline script" in m], "the refusal is in the console"

    driver.get(framer)
    frame = _until(driver, lambda d: d.find_elements("id", "f"), "the framing page")[0]
    driver.switch_to.frame(frame)
    inside = driver.execute_script("return [document.URL, !!document.getElementById('token')]")
    driver.switch_to.default_content()
    assert inside[1] is False and not inside[0].startswith(service.url), f"the page loaded in a frame: {inside}"
    assert [m for m in _console(driver) if "frame-ancestors" in m or "X-Frame-Options" in m], _console(driver)


def test_two_replicas_share_one_cap_and_a_killed_replicas_slots_free_themselves(tmp_path: Path, postgres_url: str):
    """Issue 23: the cap counts every replica's streams (each had its own count: two replicas gave a tenant twice
    the cap), and the streams of a replica that was SIGKILLed — it gave nothing back — free within its lease."""
    rules = [Rule(tool(ASK, {"question": "等着"}), system=CLARIFIER, repeat=True)]
    with ScriptedModel(rules) as model:
        dep = Deployment(tmp_path, env=model.env, extra_config=(
            f'max_streams_per_tenant = {CAP}\ndatabase_url = "{postgres_url}"\nlease_s = 2\n{scrape_config(tmp_path)}'))
        r1, r2 = (Service(dep, name, env={"FLOWER_SERVICE_REPLICA": name}) for name in ("r1", "r2"))
        try:
            for r in (r1, r2):
                r.start(timeout=120)
            acme = r1.client("acme")
            r = acme.post("/v1/runs", json={"ask": "一个会一直等的活", "options": {"clarify_only": True}})
            assert r.status_code == 201, r.text
            run_id = r.json()["id"]
            wait_question(acme, run_id)
            on_r1 = [_send_open(r1.url, run_id) for _ in range(CAP // 2)]
            assert [_status(s) for s in on_r1] == [200] * (CAP // 2)
            on_r2 = [_send_open(r2.url, run_id) for _ in range(CAP - CAP // 2)]
            assert [_status(s) for s in on_r2] == [200] * (CAP - CAP // 2)
            more = [_send_open((r1, r2)[i % 2].url, run_id) for i in range(16)]  # at once, to both
            assert [_status(s) for s in more] == [429] * 16, "the cap is the tenant's, not each replica's"
            for s in more:
                _cut(s)
            r1.stop(signal.SIGKILL)  # its streams die with it, their slots not given back
            took: list[socket.socket] = []

            def one_more() -> bool:  # r1's slots run out within its lease: r2 opens them again
                s = _send_open(r2.url, run_id)
                if _status(s) == 200:
                    took.append(s)
                else:
                    _cut(s)
                return len(took) == CAP // 2

            wait_for(one_more, timeout=30, every=0.2, what="the killed replica's slots to free themselves")
            beyond = _send_open(r2.url, run_id)
            assert _status(beyond) == 429, "and no more than them"
            for s in [*on_r1, *on_r2, *took, beyond]:
                _cut(s)
        finally:
            for r in (r1, r2):
                r.stop()
            from _service_helpers import end_leftover_runs

            end_leftover_runs(dep.data / "runs")

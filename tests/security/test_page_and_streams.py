"""Issue 21, items 10 and 12, through the real service: a tenant's cap of event streams holds when its opens come
all at once (the count was checked in the handler but taken only when the stream's body started: 21 of 40 got
through a cap of 4), and every slot comes back, a stream cut before its body started included."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from _service_helpers import TOKENS, Deployment, Service, wait_for, wait_question
from flower.testing import Rule, ScriptedModel, tool
from sandbox.testing import ASK, CLARIFIER

pytestmark = pytest.mark.cli

CAP = 4


@pytest.fixture(scope="module")
def waiting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
    """One service (a cap of 4 streams per tenant) and one run of acme's that waits on its question throughout."""
    rules = [Rule(tool(ASK, {"question": "等着"}), system=CLARIFIER, repeat=True)]
    with ScriptedModel(rules) as model:
        dep = Deployment(tmp_path_factory.mktemp("streams"), env=model.env,
                         extra_config=f"max_streams_per_tenant = {CAP}\n")
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
    text = httpx.get(f"{url}/metrics").text
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

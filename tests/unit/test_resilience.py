"""Resilience: what is worth a retry, how long to wait, and whether the endpoint answers."""

from __future__ import annotations

import asyncio
import socket

import pytest

from flower.core.resilience import Resilience, classify, endpoint, reachable


@pytest.mark.parametrize("text,kind", [
    (None, "unknown"), ("", "unknown"),
    ("API Error: 529 Overloaded. This is a server-side issue", "transient"),
    ("API Error: Connection dropped (ECONNRESET). Check the gateway", "transient"),
    ("getaddrinfo ENOTFOUND api.anthropic.com", "transient"),
    ("429 Too Many Requests", "transient"), ("Request timed out", "transient"),
    ("Invalid API key · Fix external API key", "fatal"),
    ("401 connection refused by auth proxy", "fatal"),  # fatal is tested first: 401 texts say "connection" too
    ("Claude Code returned an error result: error_max_budget_usd, budget exhausted", "fatal"),
    ("max_turns reached", "fatal"), ("Your credit balance is too low", "fatal"),
    ("OSError: [Errno 28] No space left on device", "fatal"), ("ENOSPC: no space left, write", "fatal"),
    ("sqlite3.OperationalError: database or disk is full", "fatal"),
    ("something odd happened (exit code: 1)", "unknown"),
])
def test_classify(text, kind):
    assert classify(text) == kind


def test_should_retry_follows_retry_unknown():
    assert Resilience().should_retry("transient") and Resilience().should_retry("unknown")
    assert not Resilience(retry_unknown=False).should_retry("unknown")
    assert not Resilience().should_retry("fatal")


def test_delay_for_backs_off_with_jitter_and_a_cap():
    r = Resilience(base_delay=4.0, max_delay=120.0)
    for attempt, base in ((1, 4.0), (2, 8.0), (3, 16.0), (10, 120.0)):
        for _ in range(50):
            assert 0.75 * base <= r.delay_for(attempt) <= 1.25 * base


def test_endpoint_follows_the_gateway(monkeypatch):
    assert endpoint() == ("api.anthropic.com", 443)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:8123/v1")
    assert endpoint() == ("127.0.0.1", 8123)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://gateway.local")
    assert endpoint() == ("gateway.local", 80)


async def test_reachable_and_wait_online_on_loopback(monkeypatch):
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    assert await reachable("127.0.0.1", port)
    assert not await reachable("127.0.0.1", dead, timeout=1)
    heard: list[str] = []
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{dead}")
    assert not await Resilience(max_offline_wait=0.2, probe_interval=0.05).wait_online(heard.append)
    assert len(heard) == 1 and "不可达" in heard[0]
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    assert await Resilience().wait_online(heard.append)
    server.close()
    await server.wait_closed()

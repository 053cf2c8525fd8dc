"""The bridge inside a sandbox (``sandbox.bridge``): byte for byte to the gateway's socket, and a gateway that is
away for a moment — restarting, or its replica gone until another takes the run over — is waited for."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

import sandbox.bridge as bridge_module
from sandbox.bridge import open_bridge


def _echo_gateway(path: Path, ready: threading.Event) -> threading.Thread:
    """A stand-in for the gateway's socket: answers each connection with what it got, upper-cased."""

    def serve() -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen()
        ready.set()
        conn, _ = server.accept()
        with conn:
            conn.sendall(conn.recv(1024).upper())
        server.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def _ask(url_port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", url_port), timeout=10) as c:
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := c.recv(1024):
            got += chunk
        return got


def test_a_connection_made_while_the_gateway_is_away_is_held_and_led_on_when_it_is_back(tmp_path: Path):
    path = tmp_path / "gateway.sock"
    bridge = open_bridge(path)
    try:
        answer: list[bytes] = []
        asker = threading.Thread(target=lambda: answer.append(_ask(bridge.port, b"ping")), daemon=True)
        asker.start()
        time.sleep(0.6)  # the CLI's call is in: no gateway yet
        assert not answer, "held, not refused"
        ready = threading.Event()
        _echo_gateway(path, ready)
        asker.join(10)
        assert answer == [b"PING"], "led on, its bytes intact, once the gateway answered"
    finally:
        bridge.close()


def test_a_gateway_away_for_longer_than_the_wait_closes_the_connection(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(bridge_module, "WAIT_S", 0.3)
    bridge = open_bridge(tmp_path / "gateway.sock")
    try:
        t0 = time.monotonic()
        try:
            got = _ask(bridge.port, b"ping")
        except ConnectionResetError:  # closed with the CLI's bytes unread: reset, as a CLI sees it (and retries)
            got = b""
        assert got == b"" and time.monotonic() - t0 >= 0.3
    finally:
        bridge.close()

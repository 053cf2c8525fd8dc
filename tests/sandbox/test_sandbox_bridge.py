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


def _recording_gateway(path: Path, got: list[bytes]) -> socket.socket:
    """A gateway's socket that keeps what each connection sent (until it half-closes) and answers ``ok``."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(3):  # small reads: the bridge's chunks are not the gateway's
                    data += chunk
                got.append(data)
                conn.sendall(b"ok " + data[-4:])

    threading.Thread(target=serve, daemon=True).start()
    return server


@pytest.mark.parametrize("stream", [True, False])
def test_a_rehearsing_bridge_answers_the_cli_itself_and_leads_nothing_to_the_gateway(tmp_path: Path,
                                                                                     stream: bool) -> None:
    """A warm sandbox's bridge before its claim: the CLI's request is answered with an empty reply of the shape it
    asked for (an SSE stream or one JSON message) and the connection closes; the gateway sees nothing."""
    import http.client
    import json

    got: list[bytes] = []
    server = _recording_gateway(tmp_path / "gateway.sock", got)
    b = open_bridge(tmp_path / "gateway.sock", rehearsal=True)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=10)
        body = json.dumps({"model": "claude-x", "stream": stream,
                           "messages": [{"role": "user", "content": "x" * 70000}]})
        conn.request("POST", "/v1/messages?beta=true", body=body, headers={"x-api-key": b.stand_in})
        r = conn.getresponse()
        text = r.read().decode()
        assert r.status == 200 and r.getheader("connection") == "close"
        if stream:
            events = [json.loads(x[len("data: "):]) for x in text.splitlines() if x.startswith("data: ")]
            assert [e["type"] for e in events] == ["message_start", "content_block_start", "content_block_delta",
                                                   "content_block_stop", "message_delta", "message_stop"], events
            assert events[0]["message"]["model"] == "claude-x" and events[4]["delta"]["stop_reason"] == "end_turn"
        else:
            message = json.loads(text)
            assert message["content"] == [{"type": "text", "text": ""}] and message["stop_reason"] == "end_turn"
        time.sleep(0.2)
        assert got == [], "a rehearsal reached the gateway"
    finally:
        b.close()
        server.close()


def test_a_claimed_bridge_swaps_the_stand_in_key_for_the_runs_token_and_passes_the_rest_byte_for_byte(
        tmp_path: Path) -> None:
    """Once claimed, connections are led to the gateway; the stand-in the waiting CLI was spawned with becomes the
    run's token wherever the CLI's bytes carry it — split over several sends too — and nothing else changes, in
    either direction."""
    got: list[bytes] = []
    server = _recording_gateway(tmp_path / "gateway.sock", got)
    b = open_bridge(tmp_path / "gateway.sock", rehearsal=True)
    token = "flower-run-" + "t" * 43
    try:
        b.claim(token)
        assert not b.rehearsing
        stand_in = b.stand_in.encode()
        sent = b"POST /v1/messages HTTP/1.1\r\nx-api-key: " + stand_in + b"\r\nf" + b"\r\n\r\n{" + stand_in[:5] + b"}"
        with socket.create_connection(("127.0.0.1", b.port), timeout=10) as c:
            for i in range(0, len(sent), 7):  # the stand-in arrives in pieces
                c.sendall(sent[i:i + 7])
                time.sleep(0.01)
            c.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := c.recv(1024):
                answer += chunk
        assert got == [sent.replace(stand_in, token.encode())], got
        assert answer == b"ok " + sent[-4:]  # the gateway's bytes come back as they were
    finally:
        b.close()
        server.close()

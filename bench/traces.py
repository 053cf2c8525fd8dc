"""What traces cost a run: the same scripted model calls through the gateway with traces off and on, in one run.

Two in-process gateways on their own unix sockets in front of one scripted model: one with no spans (traces off:
``otlp_endpoint`` empty), one whose forward sends a span per model call and per tool call to a real OTLP/HTTP
receiver on 127.0.0.1 (``service.tracing.otlp``, the service's own exporter). Each round sends ``--turns`` streamed
``POST /v1/messages`` through both, interleaved, so load drifts hit both alike. Figures: median and p95 of the
whole request per path and the ratio on/off; then the exporter's own cost per span (``send``: building the span and
queueing it, the caller's only cost — the export runs on its thread). Prints, never asserts.

    .venv/bin/python -m bench.traces [--turns 20] [--rounds 10] [--spans 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from flower.testing import Rule, ScriptedModel, calls, call, say
from service.gateway import Gateway, Grant, new_token, upstream_of
from service.metrics import Metrics
from service.tracing import Span, WireSpans, span_id_of
from service.tracing.otlp import OtlpExporter


class _Sink(BaseHTTPRequestHandler):
    received = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        _Sink.received += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _rules(turns: int) -> list[Rule]:
    usage = {"input_tokens": 1000, "output_tokens": 50}
    return [Rule(calls(call("Bash", {"command": f"echo {i}"}), text=f"turn {i}", usage=usage) if i % 2 else
                 say(f"turn {i} " + "word " * 50, usage=usage), prompt=f"turn-{i}-", repeat=True)
            for i in range(turns)]


def _body(i: int) -> dict[str, object]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": True,
            "messages": [{"role": "user", "content": f"turn-{i}- " + "context " * (50 * i)}]}


async def _session(client: httpx.AsyncClient, turns: int, token: str, session: str) -> list[float]:
    out = []
    for i in range(turns):
        t0 = time.perf_counter()
        async with client.stream("POST", "/v1/messages", json=_body(i),
                                 headers={"x-api-key": token, "x-claude-code-session-id": session}) as r:
            async for _ in r.aiter_raw():
                pass
            assert r.status_code == 200, r.status_code
        out.append(time.perf_counter() - t0)
    return out


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def calls_off_and_on(turns: int, rounds: int, url: str, metrics: Metrics) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="flower-bench-traces-"))
    exporter = OtlpExporter(url, metrics.spans_dropped)
    gateways = {"off": Gateway(), "on": Gateway()}
    gateways["on"].spans = WireSpans(exporter)
    figures: dict[str, list[float]] = {name: [] for name in gateways}
    with ScriptedModel(_rules(turns)) as model:
        upstream, auth = upstream_of(model.env)
        clients, fds, tokens = {}, [], {}
        for name, gw in gateways.items():
            token, digest = new_token()
            tokens[name] = token
            await gw.open(Grant(f"bench-{name}", "bench", digest, upstream, auth), tmp / name)
            fd = os.open(tmp / name, os.O_RDONLY)
            fds.append(fd)
            clients[name] = httpx.AsyncClient(base_url="http://gw", timeout=60, transport=httpx.AsyncHTTPTransport(
                uds=f"/proc/self/fd/{fd}/gateway.sock"))
        for name, c in clients.items():  # warm both once
            await _session(c, 2, tokens[name], "warm")
        for n in range(rounds):
            for name, c in clients.items():
                figures[name] += await _session(c, turns, tokens[name], f"s-{n}")
        for name, gw in gateways.items():
            await clients[name].aclose()
            await gw.close(f"bench-{name}")
            await gw.aclose()
        for fd in fds:
            os.close(fd)
    exporter.close(timeout_s=30)
    off, on = statistics.median(figures["off"]), statistics.median(figures["on"])
    print(f"load: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores; {rounds} × {turns} model calls per path "
          f"(half of them asking for a tool call)")
    print(f"{'traces':7} {'median ms':>10} {'p95 ms':>8}")
    for name, xs in figures.items():
        print(f"{name:7} {statistics.median(xs) * 1e3:10.3f} {_p(xs, .95) * 1e3:8.3f}")
    dropped = metrics.registry.get_sample_value("flower_trace_spans_dropped_total", {"tenant": "bench"}) or 0
    print(f"on/off median ratio: {on / off:.3f} (added {(on - off) * 1e3:+.3f} ms per model call); "
          f"OTLP requests received {_Sink.received}, spans dropped {dropped:.0f}")


def send_cost(spans: int, url: str, metrics: Metrics) -> None:
    exporter = OtlpExporter(url, metrics.spans_dropped)
    batch = [Span("bench", f"run-{i % 50}", "chat claude", i + 1, span_id_of("run", f"run-{i % 50}"), 1.0, 2.0,
                  {"gen_ai.usage.input_tokens": 1000, "flower.cost_usd": 0.01}) for i in range(spans)]
    t0 = time.perf_counter()
    for i, span in enumerate(batch):
        exporter.send(span)
        if i % 2000 == 1999:
            time.sleep(0.6)  # let its thread drain the queue (the bound is 4096): a run's pace, not a flood
    sent = time.perf_counter() - t0 - 0.6 * (spans // 2000)
    exporter.close(timeout_s=30)
    print(f"send: {sent / spans * 1e6:.1f} µs per span on the caller's thread ({spans} spans)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--spans", type=int, default=20_000)
    args = ap.parse_args()
    from service.logging import configure_logging

    configure_logging("json", level="WARNING")  # the gateway's per-call debug lines are not the figure
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{sink.server_address[1]}/v1/traces"
    metrics = Metrics()
    asyncio.run(calls_off_and_on(args.turns, args.rounds, url, metrics))
    send_cost(args.spans, url, metrics)
    sink.shutdown()


if __name__ == "__main__":
    main()

"""The model gateway's cost: the same 20-turn scripted session direct to the scripted model and through the
gateway, in one run; and the gateway's memory per 100 concurrent streams.

Paths measured, each turn a streamed ``POST /v1/messages`` (SSE) whose answer grows with the turn:
  direct    client → scripted model (TCP loopback)
  gateway   client → the run's unix socket → gateway → scripted model
  bridged   client → the in-sandbox loopback bridge → socket → gateway → scripted model (what a run does)
Figures: median and p95 of the whole request, time to the first streamed byte, and the added latency
(path − direct). Targets (issue 10): added median < 2 ms, first byte within 1 ms of direct.
Memory: the gateway in a process of its own, RSS with 100 streams held open minus idle, per stream.
Under load (``--rps R``): requests sent open-loop at R a second for ``--seconds`` (each one's latency counted
from when it was due, so a backlog shows), direct and through the gateway — in a process of its own, as in a
service — alternating; the added latency is the gateway's p50/p99 minus the direct path's at the same rate.
Target (issue 25): added p50 <= 1 ms and p99 <= 5 ms at 500 requests/s.
Prints, never asserts.

    .venv/bin/python -m bench.gateway [--turns 20] [--rounds 5] [--streams 100] [--rps 500 --seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from flower.testing import Rule, ScriptedModel, say
from sandbox.bridge import open_bridge
from service.gateway import MAX_IN_FLIGHT, Gateway, Grant, new_token, upstream_of


def _rules(turns: int) -> list[Rule]:
    return [Rule(say(f"turn {i} " + "word " * (20 * i)), prompt=f"turn-{i}-") for i in range(turns)]


def _body(i: int) -> dict[str, object]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": True,
            "messages": [{"role": "user", "content": f"turn-{i}- " + "context " * (200 * i)}]}


async def _session(client: httpx.AsyncClient, turns: int, token: str) -> list[tuple[float, float]]:
    """(first byte, whole request) seconds per turn."""
    out = []
    for i in range(turns):
        t0 = time.perf_counter()
        async with client.stream("POST", "/v1/messages", json=_body(i), headers={"x-api-key": token}) as r:
            first = None
            async for _ in r.aiter_raw():
                if first is None:
                    first = time.perf_counter() - t0
            assert r.status_code == 200, r.status_code
        out.append((first or 0.0, time.perf_counter() - t0))
    return out


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def latency(turns: int, rounds: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="flower-bench-gw-"))
    gw = Gateway()
    with ScriptedModel([r for _ in range(rounds + 1) for r in _rules(turns)]) as model:
        token, digest = new_token()
        upstream, auth = upstream_of(model.env)
        await gw.open(Grant("bench", "bench", digest, upstream, auth), tmp / "gateway")
        fd = os.open(tmp / "gateway", os.O_RDONLY)
        sock = f"/proc/self/fd/{fd}/gateway.sock"
        bridge = open_bridge(tmp / "gateway" / "gateway.sock")
        clients = {
            "direct": httpx.AsyncClient(base_url=model.url, timeout=60),
            "gateway": httpx.AsyncClient(base_url="http://gw", transport=httpx.AsyncHTTPTransport(uds=sock), timeout=60),
            "bridged": httpx.AsyncClient(base_url=bridge.url, timeout=60),
        }
        figures: dict[str, list[tuple[float, float]]] = {k: [] for k in clients}
        for name, c in clients.items():  # warm every path once
            await _session(c, 1, token)
        for _ in range(rounds):  # interleaved, so load drifts hit every path alike
            for name, c in clients.items():
                figures[name] += await _session(c, turns, token)
        for c in clients.values():
            await c.aclose()
        bridge.close()
        await gw.aclose()
        os.close(fd)
    base_total = statistics.median(t for _, t in figures["direct"])
    base_first = statistics.median(f for f, _ in figures["direct"])
    print(f"load: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores; {rounds} × {turns}-turn session per path")
    print(f"{'path':8} {'median ms':>10} {'p95 ms':>8} {'1st byte ms':>12} {'added ms':>9} {'1st byte +ms':>13}")
    for name, xs in figures.items():
        total = [t for _, t in xs]
        first = [f for f, _ in xs]
        print(f"{name:8} {statistics.median(total) * 1e3:10.2f} {_p(total, .95) * 1e3:8.2f} "
              f"{statistics.median(first) * 1e3:12.2f} {(statistics.median(total) - base_total) * 1e3:9.2f} "
              f"{(statistics.median(first) - base_first) * 1e3:13.2f}")


CHILD = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from service.gateway import Gateway, Grant
    async def main():
        from service.logging import configure_logging
        configure_logging("json", level="WARNING")
        gw = Gateway()
        if len(sys.argv) > 4:  # metered: a tenant with a run budget, its holds and usage in a SQLite registry
            from service.gateway.budgets import Budgets
            from service.metrics import Metrics
            from service.registry import Registry
            from service.tenants import Tenants
            root = Path(sys.argv[4])
            registry = Registry(root / "registry.sqlite3")
            registry.runs.create(id="bench", tenant="bench", ask="bench", options={}, repo=str(root))
            (root / "tenants.toml").write_text(
                f'[[tenant]]\\nname = "bench"\\ntoken = "{"t" * 24}"\\nrepo = "{root}"\\n'
                'credentials = "bench.env"\\nbudget_usd.run = 1000000.0\\n')
            Budgets(registry.spend, Tenants(root / "tenants.toml"), gw, Metrics(), lambda run, why: None, owner="bench")
        await gw.open(Grant("bench", "bench", sys.argv[2], sys.argv[3], [("x-api-key", "k")]), Path(sys.argv[1]))
        print("ready", flush=True)
        await asyncio.Event().wait()
    asyncio.run(main())
""")


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def memory(streams: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="flower-bench-gwm-"))
    rules = [Rule(say("held open " + "x" * 2000, delay=5.0), prompt="hold", repeat=True)]
    with ScriptedModel(rules) as model:
        token, digest = new_token()
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp / "gateway"), digest, model.url],
                                 stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            idle = _rss_kb(child.pid)
            fd = os.open(tmp / "gateway", os.O_RDONLY)
            transport = httpx.AsyncHTTPTransport(uds=f"/proc/self/fd/{fd}/gateway.sock")
            limits = httpx.Limits(max_connections=streams + 10)
            async with httpx.AsyncClient(base_url="http://gw", transport=transport, timeout=60, limits=limits) as c:
                body = {"model": "m", "max_tokens": 10, "stream": False,
                        "messages": [{"role": "user", "content": "hold " + "c" * 20_000}]}
                tasks = [asyncio.create_task(c.post("/v1/messages", json=body, headers={"x-api-key": token}))
                         for _ in range(streams)]
                await asyncio.sleep(3.0)  # every request is in flight, held by the model's delay
                busy = _rss_kb(child.pid)
                done = await asyncio.gather(*tasks)
            ok = sum(1 for r in done if r.status_code == 200)
            os.close(fd)
        finally:
            child.kill()
    print(f"memory: gateway process idle {idle / 1024:.1f} MB, with {streams} streams in flight "
          f"{busy / 1024:.1f} MB → {(busy - idle) / streams:.1f} kB per stream ({ok}/{streams} answered 200)")


SSE = b"".join(b"event: %s\ndata: %s\n\n" % (e, d) for e, d in (
    (b"message_start", b'{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"m",'
                       b'"content":[],"usage":{"input_tokens":1,"output_tokens":1}}}'),
    (b"content_block_start", b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'),
    (b"content_block_delta", b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"pong"}}'),
    (b"content_block_stop", b'{"type":"content_block_stop","index":0}'),
    (b"message_delta", b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}'),
    (b"message_stop", b'{"type":"message_stop"}')))
UPSTREAM = textwrap.dedent("""
    import asyncio, sys
    ANSWER = (b"HTTP/1.1 200 OK\\r\\ncontent-type: text/event-stream\\r\\ncontent-length: %d\\r\\n\\r\\n"
              % len(SSE)) + SSE
    async def serve(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\\r\\n\\r\\n")
                n = next((int(l.split(b":")[1]) for l in head.lower().split(b"\\r\\n")
                          if l.startswith(b"content-length:")), 0)
                await reader.readexactly(n)
                writer.write(ANSWER)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()
    asyncio.run(main())
""")


class _Conn:
    """One keep-alive HTTP/1.1 connection of the load generator (h11, no client library's own cost)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def call(self, request: bytes) -> int:
        import h11

        conn = h11.Connection(h11.CLIENT)
        self.writer.write(request)  # prebuilt bytes; h11 is told of a request only so that it reads the answer
        conn.send(h11.Request(method="POST", target="/v1/messages", headers=[("host", "x"), ("content-length", "0")]))
        status = 0
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA:
                conn.receive_data(await self.reader.read(65536))
            elif isinstance(ev, h11.Response):
                status = ev.status_code
            elif isinstance(ev, (h11.EndOfMessage, h11.ConnectionClosed)):
                return status


async def _open_loop(connect: Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]],
                     request: bytes, rps: float, seconds: float, conns: int) -> list[float]:
    """Latencies (s) of requests due every 1/rps for ``seconds`` over ``conns`` connections, from when each was due."""
    pool: asyncio.Queue[_Conn] = asyncio.Queue()
    for _ in range(conns):
        pool.put_nowait(_Conn(*await connect()))
    out: list[float] = []
    refused: list[int] = []

    async def one(due: float) -> None:
        c = await pool.get()
        try:
            status = await c.call(request)
        finally:
            pool.put_nowait(c)
        (out.append(time.perf_counter() - due) if status == 200 else refused.append(status))

    start, tasks = time.perf_counter(), []
    for i in range(int(rps * seconds)):
        due = start + i / rps
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        pool.get_nowait().writer.close()
    if refused:
        print(f"  {len(refused)} of {len(tasks)} answered {sorted(set(refused))}, not counted")
    return out


async def sustained(rps: float, seconds: float, rounds: int = 2, *, metered: bool = False) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="flower-bench-gwr-"))
    code = f"SSE = {SSE!r}\n" + UPSTREAM
    upstream = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    gateways: list[subprocess.Popen[str]] = []
    try:
        assert upstream.stdout is not None
        port = int(upstream.stdout.readline())
        token, digest = new_token()
        for name in ("gateway", "metered") if metered else ("gateway",):
            (tmp / name).mkdir()
            extra = [str(tmp / name)] if name == "metered" else []
            gateways.append(subprocess.Popen([sys.executable, "-c", CHILD, str(tmp / name / "gateway"), digest,
                                              f"http://127.0.0.1:{port}", *extra], stdout=subprocess.PIPE, text=True,
                                             cwd=Path(__file__).resolve().parents[1]))
            assert gateways[-1].stdout is not None and gateways[-1].stdout.readline().strip() == "ready"
        fds = {name: os.open(tmp / name / "gateway", os.O_RDONLY) for name in ("gateway", "metered")[:len(gateways)]}
        body = json.dumps({"model": "m", "max_tokens": 10, "stream": True,
                           "messages": [{"role": "user", "content": "ping"}]}).encode()
        request = (b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-api-key: %s\r\n"
                   b"content-length: %d\r\n\r\n%s" % (token.encode(), len(body), body))
        paths: dict[str, Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]] = {
            "direct": lambda: asyncio.open_connection("127.0.0.1", port)}
        for name, fd in fds.items():
            paths[name] = lambda fd=fd: asyncio.open_unix_connection(f"/proc/self/fd/{fd}/gateway.sock")
        conns = MAX_IN_FLIGHT // 2  # one run's calls at once are capped (MAX_IN_FLIGHT): as a CLI's would be
        figures: dict[str, list[float]] = {k: [] for k in paths}
        for connect in paths.values():
            await _open_loop(connect, request, rps, 1.0, conns)  # warm
        for _ in range(rounds):  # alternating, so load drifts hit both alike
            for name, connect in paths.items():
                figures[name] += await _open_loop(connect, request, rps, seconds, conns)
        for fd in fds.values():
            os.close(fd)
    finally:
        upstream.kill()
        for g in gateways:
            g.kill()
    load = os.getloadavg()
    print(f"sustained {rps:.0f} requests/s (streamed answers) for {rounds} × {seconds:.0f} s per path; "
          f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    print(f"{'path':8} {'p50 ms':>8} {'p99 ms':>8} {'requests':>9}")
    for name, xs in figures.items():
        print(f"{name:8} {_p(xs, .5) * 1e3:8.2f} {_p(xs, .99) * 1e3:8.2f} {len(xs):9d}")
    d = figures["direct"]
    for name in list(figures)[1:]:
        g = figures[name]
        what = "the gateway" if name == "gateway" else "the gateway with a budget (holds in SQLite)"
        print(f"added by {what}: p50 {(_p(g, .5) - _p(d, .5)) * 1e3:.2f} ms, p99 {(_p(g, .99) - _p(d, .99)) * 1e3:.2f} "
              f"ms (p50 {_p(g, .5) / _p(d, .5):.2f}x direct); target p50 <= 1 ms, p99 <= 5 ms")


def main() -> None:
    from service.logging import configure_logging

    configure_logging("json", level="WARNING", stream=open(os.devnull, "w"))  # as a service logs: not per answer
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--streams", type=int, default=100)
    p.add_argument("--rps", type=float, default=0, help="only the sustained-rate measure, at this many requests/s")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--metered", action="store_true",
                   help="with --rps: also through a gateway whose tenant has a budget (a hold and a settle per call)")
    args = p.parse_args()
    if args.rps:
        asyncio.run(sustained(args.rps, args.seconds, metered=args.metered))
        return
    asyncio.run(latency(args.turns, args.rounds))
    asyncio.run(memory(args.streams))


if __name__ == "__main__":
    main()

"""The model gateway's cost: the same 20-turn scripted session direct to the scripted model and through the
gateway, in one run; and the gateway's memory per 100 concurrent streams.

Paths measured, each turn a streamed ``POST /v1/messages`` (SSE) whose answer grows with the turn:
  direct    client → scripted model (TCP loopback)
  gateway   client → the run's unix socket → gateway → scripted model
  bridged   client → the in-sandbox loopback bridge → socket → gateway → scripted model (what a run does)
Figures: median and p95 of the whole request, time to the first streamed byte, and the added latency
(path − direct). Targets (issue 10): added median < 2 ms, first byte within 1 ms of direct.
Memory: the gateway in a process of its own, RSS with 100 streams held open minus idle, per stream.
Prints, never asserts.

    .venv/bin/python -m bench.gateway [--turns 20] [--rounds 5] [--streams 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

from flower.testing import Rule, ScriptedModel, say
from sandbox.bridge import open_bridge
from service.gateway import Gateway, Grant, new_token, upstream_of


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


def main() -> None:
    from service.logging import configure_logging

    configure_logging("json", level="WARNING", stream=open(os.devnull, "w"))  # as a service logs: not per answer
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--streams", type=int, default=100)
    args = p.parse_args()
    asyncio.run(latency(args.turns, args.rounds))
    asyncio.run(memory(args.streams))


if __name__ == "__main__":
    main()

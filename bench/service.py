"""Service figures: GET /v1/runs/{id} and SSE fan-out (100 clients on one run), against a bare Litestar
hello handler served the same way in the same process.

Both apps run under uvicorn (h11) on 127.0.0.1, each in a process of its own started by this script
(one worker, the same settings); the load comes from this process's event loop (httpx), the same
client for both, so the ratio is what means something. The run is a finished run with ``--events`` event lines in its events.jsonl
(the replay path every SSE client takes first); its registry row is real SQLite. Prints, never asserts.

    .venv/bin/python bench/service.py [--requests 2000] [--concurrency 16] [--clients 100] [--events 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # this file's name must not hide the service package

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from litestar import Litestar, get  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"


class Served:
    """``python bench/service.py --serve KIND --root DIR`` in a subprocess; its URL once it listens."""

    def __init__(self, kind: str, root: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--root", str(root)],
                                     stdout=subprocess.PIPE, text=True)

    def __enter__(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line.startswith("http://"), line
        return line

    def __exit__(self, *_: Any) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def serve(app: Any) -> None:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False,
                                           lifespan="on", http="h11"))
    original = server.startup

    async def startup(sockets: Any = None) -> None:
        await original(sockets)
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        print(f"http://{host}:{port}", flush=True)

    server.startup = startup  # type: ignore[method-assign]
    server.run()


def hello_app() -> Litestar:
    @get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    @get("/sse")
    async def sse() -> Any:
        from litestar.response import ServerSentEvent, ServerSentEventMessage

        async def gen() -> Any:
            for i in range(1, EVENTS + 1):
                yield ServerSentEventMessage(data=json.dumps({"seq": i, "kind": "text", "text": "x" * 80}), id=i)
            yield ServerSentEventMessage(data="{}", event="end")

        return ServerSentEvent(gen())

    return Litestar([hello, sse], logging_config=None, openapi_config=None)


def make_run(root: Path, events: int) -> str:
    """A service folder whose registry holds one finished run of ``events`` events; the run's id."""
    from sandbox.layout import RunLayout
    from service.app import new_run_id
    from service.config import load_config
    from service.registry import open_registry

    repo = root / "repo"
    repo.mkdir()
    for cmd in (["init", "-q", "-b", "main"], ["-c", "user.email=b@b", "-c", "user.name=b", "commit", "-q",
                                               "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    creds = root / "bench.env"
    creds.write_text("ANTHROPIC_API_KEY=sk-not-used\n")
    creds.chmod(0o600)
    (root / "tenants.toml").write_text(f'[[tenant]]\nname = "bench"\ntoken = "{TOKEN}"\nrepo = "{repo}"\n'
                                       f'credentials = "{creds}"\n')
    (root / "service.toml").write_text('data_dir = "data"\ntenants = "tenants.toml"\nbackend = "local"\n'
                                       'max_streams_per_tenant = 10000\n')
    config = load_config(root / "service.toml", env={})
    run_id = new_run_id()
    registry = open_registry(config)
    registry.runs.create(id=run_id, tenant="bench", ask="bench", options={}, repo=str(repo))
    registry.runs.update(run_id, status="succeeded", started=time.time(), ended=time.time(), event_seq=events)
    registry.close()
    layout = RunLayout(config.runs_root, run_id, repo.name)
    layout.ensure()
    layout.events.write_text("".join(json.dumps({"kind": "text", "text": "x" * 80, "payload": {}}) + "\n"
                                     for _ in range(events)))
    return run_id


def service_app(root: Path) -> Litestar:
    from sandbox.backends import LocalBackend
    from service.app import create_app
    from service.config import load_config

    config = load_config(root / "service.toml", env={})
    return create_app(config, backend=LocalBackend(root=config.runs_root, isolation="none"))


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] * 1000


async def load(url: str, path: str, n: int, concurrency: int, headers: dict[str, str]) -> tuple[float, list[float]]:
    lat: list[float] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60,
                                 limits=httpx.Limits(max_connections=concurrency)) as c:
        await c.get(path)  # warm
        left = n

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                t = time.perf_counter()
                r = await c.get(path)
                lat.append(time.perf_counter() - t)
                assert r.status_code == 200, r.text

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n / (time.perf_counter() - t0), lat


async def fanout(url: str, path: str, clients: int, headers: dict[str, str]) -> tuple[float, list[float], int]:
    """``clients`` streams at once, each read to its ``end``: events delivered per second, time per stream."""
    lat: list[float] = []
    got = 0
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120,
                                 limits=httpx.Limits(max_connections=clients)) as c:
        async def one() -> None:
            nonlocal got
            t = time.perf_counter()
            async with c.stream("GET", path) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        got += 1
            lat.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(clients)))
        return got / (time.perf_counter() - t0), lat, got


EVENTS = 200


def main() -> None:
    global EVENTS
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--events", type=int, default=200)
    p.add_argument("--serve", choices=["hello", "service"], help=argparse.SUPPRESS)
    p.add_argument("--root", help=argparse.SUPPRESS)
    a = p.parse_args()
    EVENTS = a.events
    if a.serve:
        from service.logging import configure_logging

        configure_logging("json", level="WARNING", stream=sys.stderr)  # stdout carries the URL only
        serve(hello_app() if a.serve == "hello" else service_app(Path(a.root)))
        return
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with tempfile.TemporaryDirectory() as tmp:
        run_id = make_run(Path(tmp), a.events)
        rows = []
        with Served("hello", Path(tmp)) as base:
            rows.append(("hello GET", *asyncio.run(load(base, "/hello", a.requests, a.concurrency, {}))))
            b_sse = asyncio.run(fanout(base, "/sse", a.clients, {}))
        with Served("service", Path(tmp)) as svc:
            rows.append(("GET /v1/runs/{id}", *asyncio.run(load(svc, f"/v1/runs/{run_id}", a.requests,
                                                                 a.concurrency, auth))))
            s_sse = asyncio.run(fanout(svc, f"/v1/runs/{run_id}/events", a.clients, auth))
    print(f"{a.requests} requests, concurrency {a.concurrency}; SSE: {a.clients} clients x {a.events} events")
    print(f"{'':24} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for name, rps, lat in rows:
        print(f"{name:24} {rps:9.0f} {pct(lat, 50):8.1f} {pct(lat, 99):8.1f}")
    print(f"ratio GET run / hello: {rows[1][1] / rows[0][1]:.2f}x requests/s")
    print(f"{'':24} {'events/s':>9} {'p50 ms':>8} {'p99 ms':>8}   (time for one client to read its whole stream)")
    for name, (eps, lat, got) in (("hello SSE", b_sse), ("/v1/runs/{id}/events", s_sse)):
        print(f"{name:24} {eps:9.0f} {pct(lat, 50):8.1f} {pct(lat, 99):8.1f}   {got} events")
    print(f"ratio SSE fan-out / hello SSE: {s_sse[0] / b_sse[0]:.2f}x events/s")


if __name__ == "__main__":
    main()

"""One tenant floods the API of two replicas on one PostgreSQL registry while another reads and starts a run: the
scenario of tests/service/test_tenant_flood.py and bench/flood.py, measured in one run.

The flooder is a process of its own (``python _flood.py flood …``: its threads share no interpreter lock with the
reader, whose latencies would otherwise measure this process's threads, not the service). Each of its threads
submits a run and lists its runs, again and again, on one replica or the other, and ignores ``Retry-After``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _service_helpers import TOKENS, Deployment, Service, wait_question  # noqa: E402

FLOODER, QUIET = "acme", "beta"


@dataclass
class Figures:
    quiet_ms: list[float]
    """The quiet tenant's ``GET /v1/runs`` latencies before the flood, while a run of its starts."""
    flooded_ms: list[float]
    """The same during the flood, while another run of its starts."""
    statuses: Counter[int]
    """What the flooder was answered."""
    queued_max: int
    """The most runs the flooder had queued at any look during the flood."""
    start_quiet_s: float
    """Submit → first question of the quiet tenant's run before the flood, and during it."""
    start_flooded_s: float
    sent: int = 0
    notes: list[str] = field(default_factory=list)

    @staticmethod
    def p50(ms: list[float]) -> float:
        return statistics.median(ms)

    @property
    def ratio(self) -> float:
        return self.p50(self.flooded_ms) / self.p50(self.quiet_ms)

    def lines(self) -> list[str]:
        sent = sum(self.statuses.values())
        return [f"quiet tenant GET /v1/runs p50: quiet {self.p50(self.quiet_ms):.1f} ms ({len(self.quiet_ms)} reads), "
                f"flooded {self.p50(self.flooded_ms):.1f} ms ({len(self.flooded_ms)} reads): ratio {self.ratio:.2f}",
                f"quiet tenant's run, submit → asking: quiet {self.start_quiet_s:.1f} s, flooded "
                f"{self.start_flooded_s:.1f} s: ratio {self.start_flooded_s / self.start_quiet_s:.2f}",
                f"flooder: {sent} requests answered "
                + ", ".join(f"{code}: {n}" for code, n in sorted(self.statuses.items()))
                + f"; its queued runs at most {self.queued_max}"]


def deployment(root: Path, postgres_url: str, *, limits: str) -> Deployment:
    """Both tenants may run two at once; ``limits``: the fairness settings (config lines) the scenario runs with."""
    return Deployment(root, quota=2, max_running=4, extra_config=f'database_url = "{postgres_url}"\n{limits}')


def reads(urls: list[str], seconds: float, every: float = 0.05) -> list[float]:
    """The quiet tenant lists its runs on each replica in turn for ``seconds``: each read's latency in ms."""
    out: list[float] = []
    clients = [httpx.Client(base_url=u, headers={"Authorization": f"Bearer {TOKENS[QUIET]}"}, timeout=30)
               for u in urls]
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        c = clients[i % len(clients)]
        t0 = time.perf_counter()
        r = c.get("/v1/runs")
        out.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, r.text
        i += 1
        time.sleep(every)
    for c in clients:
        c.close()
    return out


def started(client: httpx.Client) -> float:
    """Submit a clarify-only run; seconds until it asks its question (its sandbox started and the CLI ran)."""
    t0 = time.monotonic()
    r = client.post("/v1/runs", json={"ask": "一个会等的活", "options": {"clarify_only": True}})
    assert r.status_code == 201, r.text
    wait_question(client, r.json()["id"], timeout=120)
    return time.monotonic() - t0


def scenario(root: Path, postgres_url: str, replicas: list[Service], *, threads: int = 30, seconds: float = 20,
             quiet_s: float = 8) -> Figures:
    """Two replicas up (``replicas``, started by the caller): reads while a run starts, quiet, then the same during
    the flood — the one difference between the two is the flood (its own runs' starts included)."""
    import psycopg

    urls = [s.url for s in replicas]
    quiet_ms: list[float] = []
    reader = threading.Thread(target=lambda: quiet_ms.extend(reads(urls, quiet_s)))
    reader.start()
    start_quiet = started(replicas[0].client(QUIET))
    reader.join()
    flood = subprocess.Popen([sys.executable, __file__, "flood", "--threads", str(threads), "--seconds",
                              str(seconds), *urls], stdout=subprocess.PIPE, text=True)
    queued_max = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal queued_max
        with psycopg.connect(postgres_url, autocommit=True) as c:
            while not stop.wait(0.2):
                row = c.execute("SELECT count(*) FROM runs WHERE tenant = %s AND status = 'queued'",
                                (FLOODER,)).fetchone()
                queued_max = max(queued_max, int(row[0]) if row else 0)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(2)  # the flood is under way
    flooded: list[float] = []
    reader = threading.Thread(target=lambda: flooded.extend(reads(urls, seconds - 4)))
    reader.start()
    start_flooded = started(replicas[1].client(QUIET))
    reader.join()
    out, _ = flood.communicate(timeout=seconds + 60)
    stop.set()
    watcher.join(5)
    statuses = Counter({int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()})
    return Figures(quiet_ms, flooded, statuses, queued_max, start_quiet, start_flooded)


def _flood(urls: list[str], threads: int, seconds: float) -> Counter[int]:
    """The flooder: ``threads`` threads submitting and listing, ignoring every 429's Retry-After."""
    counts: Counter[int] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def one(i: int) -> None:
        mine: Counter[int] = Counter()
        with httpx.Client(base_url=urls[i % len(urls)], timeout=30,
                          headers={"Authorization": f"Bearer {TOKENS[FLOODER]}"}) as c:
            n = 0
            while time.monotonic() < deadline:
                try:
                    if n % 2:
                        r = c.get("/v1/runs")
                    else:
                        r = c.post("/v1/runs", json={"ask": f"洪水 {i}-{n}", "options": {"clarify_only": True}})
                    mine[r.status_code] += 1
                except httpx.HTTPError:
                    mine[0] += 1
                n += 1
        with lock:
            counts.update(mine)

    pool = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return counts


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["flood"])
    p.add_argument("urls", nargs="+")
    p.add_argument("--threads", type=int, default=30)
    p.add_argument("--seconds", type=float, default=20)
    a = p.parse_args(argv)
    counts: dict[str, Any] = {str(k): v for k, v in _flood(a.urls, a.threads, a.seconds).items()}
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()

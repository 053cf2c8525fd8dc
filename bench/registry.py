"""The registry's speed on PostgreSQL and SQLite, beside ``pgbench``'s simple-update TPS on the same server.

    .venv/bin/python bench/registry.py [--seconds 5] [--clients 2] [--runs 200] [--progress 5] [--live 50]

One process starts a throwaway PostgreSQL (``tests/_postgres.py``'s way: a temp folder, a unix socket, fsync off),
makes a database and runs ``pgbench -i`` then ``pgbench -N`` (simple update) with ``--clients`` clients for
``--seconds``: the floor of a C client; and ``record_progress``'s statement sent by psycopg alone from as many
threads: the floor of a Python one. Then, on a fresh database of the same server migrated by ``Registry.postgres``
and on a SQLite file:

    transitions   ``--clients`` threads, each doing whole lifecycles for ``--seconds``: create → begin → take
                  (lease) → record_running → ``--progress``× record_progress → finish; writes/s = lifecycles/s ×
                  writes per lifecycle, and its ratio to pgbench's TPS (goal ≥ 0.50 — pgbench's transaction is an
                  UPDATE, a SELECT and an INSERT; each of ours is one guarded statement)
    enqueue→claim two replicas (processes, each with its own Registry) doing ``list(statuses=["queued"],
                  oldest_first=True)`` + ``begin`` + ``take`` when woken — by NOTIFY on PostgreSQL, as the
                  scheduler is (``Registry.listen``) — or every ``--poll-ms`` at the latest, while this process
                  creates ``--runs`` runs at a steady rate over ``--seconds``; latency from the row's ``created`` to the
                  lease taken; p50/p99/max (goal p99 ≤ 25 ms); every run claimed exactly once (begin's winners)
    memory        RSS and PSS (``/proc/self/smaps_rollup``) of a fresh process: imports only (the floor), holding
                  a Registry idle, and holding ``--live`` live runs with their leases renewed

Prints figures and ratios; asserts nothing. The server is stopped and its folder removed on exit, Ctrl-C and
SIGTERM included.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # ROOT first: bench/service.py must not shadow the package
# tests/_postgres (and pytest with it) is imported by the functions that start the server, never at the top: the
# memory phase's process imports this file too, and must hold only what a replica holds

if TYPE_CHECKING:
    import _postgres

TTL = 20.0
FORK = mp.get_context("fork")  # replicas: forked before any engine is open, each opens its own Registry
SPAWN = mp.get_context("spawn")  # the memory phase: a fresh interpreter, nothing inherited


def run_id() -> str:
    """The service's shape of id (``service.control.admission.new_run_id``)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(16)


def open_registry(target: str) -> Any:
    from service.registry import Registry

    return Registry.postgres(target) if target.startswith("postgresql://") else Registry(target)


# -- pgbench: the floor ------------------------------------------------------------------------------------------
def pgbench(server: _postgres.PostgresServer, clients: int, seconds: int) -> float:
    import _postgres

    db = "bench_pgbench"
    server.admin(f"CREATE DATABASE {db}")
    conn = ["-h", str(server.socket_dir), "-U", "postgres"]
    tool = str(_postgres.BIN / "pgbench")
    subprocess.run([tool, "-i", "-q", *conn, db], check=True, capture_output=True, text=True)
    out = subprocess.run([tool, "-N", "-c", str(clients), "-j", str(clients), "-T", str(seconds), *conn, db],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"tps = ([\d.]+) \((?:without initial connection time|excluding connections establishing)\)", out)
    return float(m.group(1)) if m else float("nan")


# -- psycopg alone: what a Python client gets from the same write --------------------------------------------------
def psycopg_floor(target: str, clients: int, seconds: float) -> float:
    """Writes/s of ``record_progress``'s statement (a guarded UPDATE … RETURNING the whole row) sent by psycopg
    alone — prepared, autocommit, one connection per thread: the floor of any Python registry on this server."""
    import psycopg

    reg = open_registry(target)
    ids = [run_id() for _ in range(clients)]
    for rid in ids:
        reg.runs.create(id=rid, tenant="bench", ask="bench", options={}, repo="")
        reg.runs.begin(rid, started=time.time())
    reg.close()
    url = target.replace("postgresql+psycopg://", "postgresql://")
    done = [0] * clients
    start = threading.Barrier(clients + 1)
    stop = [0.0]

    def worker(i: int) -> None:
        with psycopg.connect(url, autocommit=True) as c:
            start.wait()
            k = 0
            while time.monotonic() < stop[0]:
                k += 1
                c.execute("UPDATE runs SET event_offset = %s, event_seq = %s, claimed_cost_usd = %s, step = %s "
                          "WHERE id = %s AND status IN ('starting', 'running') RETURNING *",
                          (k, k, 0.01, "work", ids[i]), prepare=True).fetchone()
            done[i] = k

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    stop[0] = time.monotonic() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - t0)


# -- transitions -------------------------------------------------------------------------------------------------
def transitions(target: str, clients: int, seconds: float, progress: int) -> tuple[float, float, int]:
    """(writes/s, lifecycles/s, writes that found their guard failed) over ``clients`` threads."""
    reg = open_registry(target)
    done = [0] * clients
    refused = [0] * clients
    start = threading.Barrier(clients + 1)
    stop = [0.0]

    def worker(i: int) -> None:
        owner = f"bench-{i}"
        start.wait()
        while time.monotonic() < stop[0]:
            rid = run_id()
            reg.runs.create(id=rid, tenant="bench", ask="bench", options={"n": i}, repo="")
            bad = reg.runs.begin(rid, started=time.time()) is None
            lease = reg.leases.take(rid, owner, ttl=TTL, now=time.time())
            bad += lease is None
            bad += reg.runs.under(lease).record_running(rid, f"bench:{rid}") is None
            for k in range(progress):
                bad += reg.runs.under(lease).record_progress(rid, event_offset=100 * k, event_seq=k,
                                                             claimed_cost_usd=0.01 * k, step="work") is None
            bad += reg.runs.under(lease).finish(rid, "succeeded", ended=time.time()) is None
            done[i] += 1
            refused[i] += bad

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    stop[0] = time.monotonic() + seconds
    t0 = time.perf_counter()
    try:
        start.wait()
        for t in threads:
            t.join()
    finally:  # Ctrl-C: the workers end their lifecycle before the server is stopped under them
        stop[0] = 0.0
        for t in threads:
            t.join(30)
        reg.close()
    took = time.perf_counter() - t0
    lifecycles = sum(done) / took
    return lifecycles * (5 + progress), lifecycles, sum(refused)


# -- enqueue → claim ---------------------------------------------------------------------------------------------
def replica(target: str, name: str, poll_s: float, ready: Any, stop: Any, out: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends us (terminate) and then the server
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's (forked) KeyboardInterrupt
    reg = open_registry(target)
    woken = threading.Event()
    unlisten = reg.listen(woken.set)  # as the scheduler: PostgreSQL's NOTIFY wakes it (SQLite: the poll alone)
    wins: list[tuple[str, float]] = []
    lost = polls = 0
    ready.set()
    while not stop.is_set():
        polls += 1
        woken.clear()
        queued = reg.runs.list(statuses=["queued"], oldest_first=True, limit=8)
        if not queued:
            woken.wait(poll_s)
            continue
        for run in queued:
            if reg.runs.begin(run.id, started=time.time()) is None:
                lost += 1  # the other replica began it first
                continue
            if reg.leases.take(run.id, name, ttl=TTL, now=time.time()) is not None:
                wins.append((run.id, time.time() - run.created))
    unlisten()
    reg.close()
    out.put((name, wins, lost, polls))


def claims(target: str, runs: int, seconds: float, poll_s: float) -> dict[str, Any]:
    ready = [FORK.Event(), FORK.Event()]
    stop, out = FORK.Event(), FORK.Queue()
    procs = [FORK.Process(target=replica, args=(target, f"replica-{k}", poll_s, ready[k], stop, out), daemon=True)
             for k in range(2)]
    reg = open_registry(target)
    try:
        for p in procs:
            p.start()
        for e in ready:
            e.wait(60)
        made: list[str] = []
        gap = seconds / max(runs, 1)
        t0 = time.monotonic()
        for i in range(runs):  # steady: the i-th run at t0 + i·gap, however long the creates took
            time.sleep(max(0.0, t0 + i * gap - time.monotonic()))
            rid = run_id()
            reg.runs.create(id=rid, tenant="bench", ask="bench", options={}, repo="")
            made.append(rid)
        deadline = time.monotonic() + 10
        while reg.runs.count(statuses=["queued"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        stop.set()
        results = [out.get(timeout=30) for _ in procs]
        for p in procs:
            p.join(10)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        reg.close()
    wins = [w for _, ws, _, _ in results for w in ws]
    won = [rid for rid, _ in wins]
    lat = sorted(x for _, x in wins)
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else lat * 99 or [float("nan")] * 99
    return {"p50": q[49], "p99": q[98], "max": max(lat, default=float("nan")), "made": len(made),
            "once": len(set(won) & set(made)) if len(won) == len(set(won)) else -1, "twice": len(won) - len(set(won)),
            "by": {name: len(ws) for name, ws, _, _ in results}, "lost": sum(r[2] for r in results),
            "polls": sum(r[3] for r in results)}


# -- memory ------------------------------------------------------------------------------------------------------
def smaps() -> tuple[float, float]:
    """(RSS, PSS) of this process in MB."""
    kb = {k: int(v.split()[0]) for k, v in
          (ln.split(":", 1) for ln in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:])}
    return kb["Rss"] / 1024, kb["Pss"] / 1024


def memory(target: str, live: int, out: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    bare = smaps()
    import service.registry  # noqa: F401  (the imports a replica's registry needs)

    floor = smaps()
    reg = open_registry(target)
    reg.runs.list(statuses=["queued"], oldest_first=True, limit=8)
    reg.leases.unheld(now=time.time())
    reg.leases.renew("mem", ttl=TTL, now=time.time())
    idle = smaps()
    for _ in range(live):
        rid = run_id()
        reg.runs.create(id=rid, tenant="bench", ask="bench", options={}, repo="")
        reg.runs.begin(rid, started=time.time())
        lease = reg.leases.take(rid, "mem", ttl=TTL, now=time.time())
        reg.runs.under(lease).record_running(rid, f"bench:{rid}")
    for k in range(3):  # renewed as the scheduler does, and each run's progress read once per round
        leases = reg.leases.renew("mem", ttl=TTL, now=time.time())
        for rid, lease in leases.items():
            reg.runs.under(lease).record_progress(rid, event_offset=k, event_seq=k, claimed_cost_usd=0.0, step="work")
    held = len(reg.leases.renew("mem", ttl=TTL, now=time.time()))
    busy = smaps()
    reg.close()
    out.put((bare, floor, idle, busy, held))


def measure_memory(target: str, live: int) -> tuple[Any, ...]:
    out = SPAWN.Queue()
    p = SPAWN.Process(target=memory, args=(target, live, out), daemon=True)
    p.start()
    try:
        return out.get(timeout=120)  # type: ignore[no-any-return]
    finally:
        p.join(10)
        if p.is_alive():
            p.terminate()


# -- the run -----------------------------------------------------------------------------------------------------
def main(a: argparse.Namespace) -> None:
    import _postgres

    why = _postgres.missing()
    if why:
        sys.exit(f"no PostgreSQL to bench on: {why}")
    t_start = time.monotonic()
    took: dict[str, float] = {}

    def lap(name: str, since: list[float] = [t_start]) -> None:
        took[name] = time.monotonic() - since[0]
        since[0] = time.monotonic()

    server = _postgres.start_server("flower-bench-pg-", template=False)
    lap("server")
    try:
        with tempfile.TemporaryDirectory(prefix="flower-bench-registry-") as tmp:
            tps = pgbench(server, a.clients, a.seconds)
            lap("pgbench")
            server.admin("CREATE DATABASE bench_registry")
            targets = {"PostgreSQL": server.url("bench_registry"), "SQLite": str(Path(tmp) / "registry.db")}
            open_registry(targets["PostgreSQL"]).close()  # migrated before anything is timed
            open_registry(targets["SQLite"]).close()
            lap("migrate")
            floor = psycopg_floor(targets["PostgreSQL"], a.clients, a.seconds)
            lap("psycopg")
            rates = {db: transitions(t, a.clients, a.seconds, a.progress) for db, t in targets.items()}
            lap("transitions")
            lat = {db: claims(t, a.runs, a.seconds, a.poll_ms / 1000) for db, t in targets.items()}
            lap("claims")
            mem = {db: measure_memory(t, a.live) for db, t in targets.items()}
            lap("memory")
    finally:
        _postgres.stop_server(server)
    version = re.findall(r"\d+\.\d+", subprocess.run([str(_postgres.BIN / "postgres"), "--version"],
                                                    capture_output=True, text=True).stdout)[0]
    load = os.getloadavg()
    per = 5 + a.progress
    print(f"registry on PostgreSQL {version} (unix socket, fsync=off) and SQLite (WAL, synchronous=NORMAL); "
          f"{a.clients} clients, {a.seconds} s a phase; {os.cpu_count()} cores, load {load[0]:.2f} {load[1]:.2f}; "
          f"took {time.monotonic() - t_start:.0f} s ({', '.join(f'{k} {v:.0f}' for k, v in took.items())})")
    print(f"{'pgbench -N (simple update) on PostgreSQL':44s} {tps:>9,.0f} TPS          floor (a C client)")
    print(f"{'the same write by psycopg alone':44s} {floor:>9,.0f} writes/s  {floor / tps:5.2f}x of pgbench TPS  "
          "floor (a Python client: prepared, autocommit)")
    for db, (writes, cycles, refused) in rates.items():
        note = f"; {refused} writes refused" if refused else ""
        print(f"{'transitions on ' + db:44s} {writes:>9,.0f} writes/s  {writes / tps:5.2f}x of pgbench TPS  "
              f"{writes / floor:5.2f}x of psycopg's  goal >= 0.50 of pgbench   ({cycles:,.0f} lifecycles/s × {per} "
              f"writes{note})")
    for db, r in lat.items():
        once = "every run claimed once" if r["once"] == r["made"] and not r["twice"] else \
            f"CLAIMED ONCE {r['once']} of {r['made']}, twice {r['twice']}"
        by = " / ".join(str(n) for n in r["by"].values())
        print(f"{'enqueue→claim on ' + db + ', 2 replicas':44s} p50 {r['p50'] * 1000:6.1f} ms  "
              f"p99 {r['p99'] * 1000:6.1f} ms  max {r['max'] * 1000:6.1f} ms  goal p99 <= 25 ms   "
              f"({r['made']} runs at {r['made'] / a.seconds:.0f}/s, poll {a.poll_ms:g} ms; {once}: {by}; "
              f"{r['lost']} begins lost to the other replica)")
    for db, (bare, floor, idle, busy, held) in mem.items():
        print(f"{'memory of a replica on ' + db:44s} RSS/PSS MB: python {bare[0]:4.1f}/{bare[1]:4.1f}  "
              f"+ imports {floor[0]:5.1f}/{floor[1]:5.1f}  "
              f"idle Registry {idle[0]:5.1f}/{idle[1]:5.1f} (+{idle[1] - floor[1]:.1f} PSS)  "
              f"{held} live runs, leases renewed {busy[0]:5.1f}/{busy[1]:5.1f} (+{busy[1] - idle[1]:.1f} PSS)")


def _terminated(_sig: int, _frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM: the same way out as Ctrl-C, through every finally


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5, help="pgbench's -T, and the length of each timed phase")
    ap.add_argument("--clients", type=int, default=2, help="pgbench's -c, and the registry's writer threads")
    ap.add_argument("--runs", type=int, default=200, help="runs enqueued over --seconds for enqueue→claim")
    ap.add_argument("--progress", type=int, default=5, help="record_progress writes per lifecycle")
    ap.add_argument("--live", type=int, default=50, help="live runs the memory phase's replica holds")
    ap.add_argument("--poll-ms", type=float, default=10.0,
                    help="a replica's longest wait after an empty poll (SQLite has no NOTIFY: its only wake-up)")
    signal.signal(signal.SIGTERM, _terminated)
    try:
        main(ap.parse_args())
    except KeyboardInterrupt:
        sys.exit(130)

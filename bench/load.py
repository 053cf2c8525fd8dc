"""K runs at once through the service: how many succeed, how long it takes, what memory each run holds.

    .venv/bin/python bench/load.py [--runs 50] [--backend local] [--warm 8]

One ``python -m service`` (real SQLite registry, real git, the local backend's bubblewrap
sandboxes, the real CLI inside each run) and one scripted model. K clarify-only runs are
submitted at once; each asks its person one question and waits. While all K wait, the memory
of every run is read from /proc (PSS: shared pages split among the processes sharing them, so
the sum is what the machine holds) and split by process: bubblewrap and its shell, the run's
Python (entrypoint, flower, the SDK), the CLI. Then every question is answered and the runs
end. Prints K, successes, wall, memory — the runs', and the service's own (the replica, ``python -m service``, and
its gateway process: PSS idle, then with the K runs live); asserts nothing.

With ``--warm N`` (a burst on a warm pool): the service keeps N waiting sandboxes per tenant, each with its
first step's CLI spawned ahead; the bench waits until they all wait, reads their memory (the density of a
waiting sandbox), submits the K runs at once and prints the claims (pick → sandbox handed over, p50/p99), the
starts (submit → first model request, warm and cold), the misses (runs that found no waiting sandbox) and the
refill rate (waiting sandboxes started per second while the pool was short).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "service")]

from _service_helpers import Deployment, Service, gateway_pid, serve  # noqa: E402
from flower.testing import Request, Rule, ScriptedModel, say, tool  # noqa: E402
from sandbox.testing import ASK, BRIEF, CLARIFIER  # noqa: E402

# containers reach the scripted model on the host's loopback (as tests/service/test_service_docker.py)
DOCKER = 'network_mode = "host"\n'
DONE = ("succeeded", "failed", "aborted", "cancelled")


FIRST: dict[str, float] = {}  # tag → wall time of its first model request


def _stamp(req: Request) -> bool:
    m = re.search(r"负载\d{3}", req.prompt)
    if m:
        FIRST.setdefault(m.group(0), time.time())
    return False  # a matcher that only looks


def rules(k: int) -> list[Rule]:
    out: list[Rule] = [Rule(say("never"), when=_stamp, repeat=True)]
    for i in range(k):
        tag = f"负载{i:03d}"
        out += [Rule(tool(ASK, {"question": f"{tag} 用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER,
                     prompt=tag),
                Rule(say(BRIEF), system=CLARIFIER, prompt=tag, result="Python")]
    return out


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _pss_kb(pid: int) -> int:
    for line in _read(f"/proc/{pid}/smaps_rollup").splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def _kind(cmdline: str) -> str:
    if "sandbox.entrypoint" in cmdline and "bwrap" not in cmdline.split("\0")[0]:
        return "python (entrypoint, flower, SDK)"
    if "claude" in cmdline.split("\0")[0]:
        return "CLI (claude)"
    return "sandbox (bwrap, sh)"


def memory(run_ids: list[str]) -> dict[str, dict[str, int]]:
    """PSS in kB per run, by kind of process: every process in the session of the run's entrypoint."""
    procs: dict[int, tuple[int, str]] = {}  # pid -> (session id, cmdline)
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _read(f"/proc/{name}/stat")
            if stat:
                fields = stat.rsplit(")", 1)[-1].split()
                procs[int(name)] = (int(fields[3]), _read(f"/proc/{name}/cmdline"))
    out: dict[str, dict[str, int]] = {}
    for run_id in run_ids:
        sids = {sid for sid, cmd in procs.values() if f"/{run_id}/mailbox/spec.json" in cmd}
        per: dict[str, int] = defaultdict(int)
        for pid, (sid, cmd) in procs.items():
            if sid in sids:
                per[_kind(cmd)] += _pss_kb(pid)
        out[run_id] = dict(per)
    return out


def waiting(runs: Path, backend: str) -> set[Path]:
    """The folders of the warm sandboxes waiting under ``runs``."""
    from sandbox.backends import DockerBackend, LocalBackend

    b = LocalBackend(root=runs) if backend == "local" else DockerBackend("unused")
    return {f for f in b.slots() if f.parent == runs.resolve()}


class Refills:
    """Watches the waiting sandboxes from the burst on: when each new one appeared."""

    def __init__(self, runs: Path, backend: str, before: set[Path]) -> None:
        self.runs, self.backend, self.seen = runs, backend, set(before)
        self.new: list[float] = []
        self.low = len(before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.25):
            now = waiting(self.runs, self.backend)
            self.low = min(self.low, len(now))
            for f in now - self.seen:
                self.seen.add(f)
                self.new.append(time.time())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _ts(line: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00")).timestamp()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main(k: int, backend: str, timeout: float, warm: int) -> None:
    extra = (DOCKER if backend == "docker" else "") + (f"warm = {warm}\n" if warm else "")
    with tempfile.TemporaryDirectory(prefix="flower-bench-load-") as tmp, ScriptedModel(rules(k)) as model:
        deployment = Deployment(Path(tmp), quota=k, max_running=k, backend=backend, extra_config=extra)
        runs_root = deployment.data / "runs"
        services: list[Service] = []
        service = serve(deployment, services, model, timeout=600)  # a first Docker start may build the image
        refills: Refills | None = None
        slot_mem: dict[str, dict[str, int]] = {}
        try:
            acme = service.client("acme")
            if warm:
                deadline = time.monotonic() + 300
                while len(slots := waiting(runs_root, backend)) < 2 * warm and time.monotonic() < deadline:
                    time.sleep(0.5)
                while time.monotonic() < deadline:  # until every waiting sandbox's CLI has started
                    slot_mem = memory([f.name for f in slots])
                    if all("CLI (claude)" in m for m in slot_mem.values()):
                        break
                    time.sleep(1)
                time.sleep(5)  # and is idle
                slot_mem = memory([f.name for f in slots])
                refills = Refills(runs_root, backend, slots)
            assert service.proc is not None
            gateway = gateway_pid(deployment.data)
            ours = {"replica (python -m service)": service.proc.pid, **({"gateway process": gateway} if gateway else {})}
            ours_idle = {name: _pss_kb(pid) for name, pid in ours.items()}
            t0 = time.perf_counter()
            t0_wall = time.time()
            ids = []
            tags: dict[str, str] = {}
            for i in range(k):
                r = acme.post("/v1/runs", json={"ask": f"负载{i:03d} 做一个 hello 程序", "options": {"clarify_only": True}})
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
                tags[ids[-1]] = f"负载{i:03d}"
            submitted = time.perf_counter() - t0
            questions: dict[str, str] = {}
            status: dict[str, str] = {}
            deadline = time.monotonic() + timeout
            while len(questions) + len([s for s in status.values() if s in DONE]) < k and time.monotonic() < deadline:
                for run_id in ids:
                    if run_id in questions or status.get(run_id) in DONE:
                        continue
                    qs = acme.get(f"/v1/runs/{run_id}/questions").json()["questions"]
                    if qs:
                        questions[run_id] = qs[0]["id"]
                    else:
                        status[run_id] = acme.get(f"/v1/runs/{run_id}").json()["status"]
                time.sleep(0.2)
            all_waiting = time.perf_counter() - t0
            folders = {ln["run"]: ln.get("warm") or ln["run"] for ln in service.lines() if ln.get("event") == "run.started"}
            mem = memory([folders.get(i, i) for i in questions])
            ours_busy = {name: _pss_kb(pid) for name, pid in ours.items()}
            for run_id, qid in questions.items():
                acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": qid, "text": "Python"})
            while time.monotonic() < deadline:
                status = {i: acme.get(f"/v1/runs/{i}").json()["status"] for i in ids}
                if all(s in DONE for s in status.values()):
                    break
                time.sleep(0.3)
            wall = time.perf_counter() - t0
            errors = [acme.get(f"/v1/runs/{i}").json().get("error") for i in ids if status.get(i) != "succeeded"]
            if refills is not None:
                deadline = time.monotonic() + 300
                while len(waiting(runs_root, backend)) < 2 * warm and time.monotonic() < deadline:
                    time.sleep(0.5)
                refills.stop()
            lines = service.lines()
        finally:
            for s in services:
                s.stop()
    starting = {ln["run"]: _ts(ln) for ln in lines if ln.get("event") == "run.starting"}
    started = {ln["run"]: ln for ln in lines if ln.get("event") == "run.started"}
    ok = sum(1 for s in status.values() if s == "succeeded")
    load = os.getloadavg()
    print(f"{k} runs at once, {backend} backend, clarify-only (one question each); load {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}; {os.cpu_count()} CPUs")
    print(f"successes {ok}/{k}   submitted in {submitted:.1f}s   all asking at {all_waiting:.1f}s   "
          f"wall {wall:.1f}s ({wall / k:.2f}s per run)")
    for name in ours_idle:
        print(f"the service's {name:30s} PSS idle {ours_idle[name] / 1024:5.0f} MiB, with {len(questions)} live runs "
              f"{ours_busy[name] / 1024:5.0f} MiB")
    totals = [sum(m.values()) for m in mem.values() if m]
    if totals:
        kinds = sorted({kind for m in mem.values() for kind in m})
        print(f"memory per waiting run (PSS, {len(totals)} runs): median {statistics.median(totals) / 1024:.0f} MiB, "
              f"max {max(totals) / 1024:.0f} MiB, all runs {sum(totals) / 1024:.0f} MiB")
        for kind in kinds:
            xs = [m.get(kind, 0) for m in mem.values() if m]
            print(f"    {kind:34s} median {statistics.median(xs) / 1024:6.0f} MiB")
    if warm and refills is not None:
        warm_ids = [i for i in ids if started.get(i, {}).get("warm")]
        claims = [_ts(started[i]) - starting[i] for i in warm_ids if i in starting]
        print(f"warm = {warm} per tenant: {len(warm_ids)} runs claimed a waiting sandbox, {k - len(warm_ids)} misses "
              f"(started cold); the pool went down to {refills.low} waiting")
        if claims:
            print(f"claim (picked → sandbox handed its run): p50 {_pct(claims, 0.5) * 1000:.0f} ms, "
                  f"p99 {_pct(claims, 0.99) * 1000:.0f} ms")
        for label, group in (("warm", warm_ids), ("cold", [i for i in ids if i not in warm_ids])):
            firsts = [FIRST[tags[i]] - t0_wall for i in group if tags[i] in FIRST]
            if firsts:
                print(f"start of the {label} runs (burst submit → first model request): "
                      f"p50 {_pct(firsts, 0.5):.2f} s, p99 {_pct(firsts, 0.99):.2f} s")
        if len(refills.new) >= 2:
            span = refills.new[-1] - refills.new[0]
            print(f"refill: {len(refills.new)} sandboxes in {span:.1f} s after the first "
                  f"({(len(refills.new) - 1) / span if span else 0:.2f} sandboxes/s)")
        dens = [sum(m.values()) for m in slot_mem.values() if m]
        if dens:
            print(f"memory per waiting sandbox, its CLI started ahead (PSS, {len(dens)}): "
                  f"median {statistics.median(dens) / 1024:.0f} MiB, max {max(dens) / 1024:.0f} MiB")
            for kind in sorted({kind for m in slot_mem.values() for kind in m}):
                xs = [m.get(kind, 0) for m in slot_mem.values() if m]
                print(f"    {kind:34s} median {statistics.median(xs) / 1024:6.0f} MiB")
    for e in [e for e in errors if e][:5]:
        print(f"failed: {e}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--backend", choices=["local", "docker"], default="local")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--warm", type=int, default=0, help="waiting sandboxes per tenant (a burst on a warm pool)")
    a = ap.parse_args()
    main(a.runs, a.backend, a.timeout, a.warm)

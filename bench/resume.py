"""A run outlives its sandbox: what a loss and a park cost, measured on ``python -m service`` (local backend, the real
CLI, one scripted model), each beside a first start in the same run.

    .venv/bin/python bench/resume.py [--parked 500] [--losses 3] [--starts 3]

1. ``--starts`` first starts (the baseline): submit → the run's first model request.
2. ``--losses`` losses: a run waiting on its question has every process of its sandbox SIGKILLed → its resumed
   step's first model request (detecting the loss, the backoff, a new sandbox, the CLI continuing its session).
3. ``--parked`` runs parked at once (``park_after_s = 0``): the service's memory (PSS) and each run's disk beyond its
   own work (its folder without its checkout) per parked run; none of their processes left.
4. Up to 50 of them answered at once: answer → each one's next model request, p50 and p99 (they start in new
   sandboxes, ``max_running`` at a time).

Prints each figure and its ratio to the first start. No timings in tests: this is where they are.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "service")]

from _service_helpers import Deployment, Service, stop_services, wait_for, wait_question, wait_status  # noqa: E402
from flower.testing import Rule, ScriptedModel, say, tool  # noqa: E402
from flower.testing.script import Request  # noqa: E402
from sandbox.testing import ASK, BRIEF, CLARIFIER, marked_pids  # noqa: E402

ANSWER = "Python"


class Clock:
    """When the scripted model heard from each run (its ask, in the first user text), in order."""

    def __init__(self) -> None:
        self.heard: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def ask(self, req: Request) -> Any:
        tag = req.prompt.split("需求方的原话:\n", 1)[-1].split("\n", 1)[0]
        with self.lock:
            self.heard.setdefault(tag, []).append(time.monotonic())
        if ANSWER in req.user + req.result_text:
            return say(BRIEF)
        return tool(ASK, {"question": f"{tag}:用什么语言?"})

    def after(self, tag: str, t0: float, timeout: float = 300) -> float:
        """Seconds from ``t0`` to the first request of ``tag``'s run after it."""
        def seen() -> float | None:
            with self.lock:
                return next((t - t0 for t in self.heard.get(tag, []) if t > t0), None)
        return float(wait_for(seen, timeout, every=0.02, what=f"a request of {tag} after {t0}"))


def pss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def du_kb(path: Path, exclude: str | None = None) -> int:
    args = ["du", "-sk", "--apparent-size", str(path)] + ([f"--exclude={exclude}"] if exclude else [])
    return int(subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()[0])


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parked", type=int, default=500)
    p.add_argument("--losses", type=int, default=3)
    p.add_argument("--starts", type=int, default=3)
    p.add_argument("--answer", type=int, default=50, help="how many parked runs are answered at once")
    p.add_argument("--max-running", type=int, default=8)
    a = p.parse_args()
    clock = Clock()
    started: list[Service] = []
    with tempfile.TemporaryDirectory(prefix="flower-bench-resume-") as tmp, \
            ScriptedModel([Rule(clock.ask, system=CLARIFIER, repeat=True)]) as model:
        dep = Deployment(Path(tmp), quota=max(a.parked, a.max_running), max_running=a.max_running,
                         extra_config="resume_backoff_s = 0\nmax_queued_per_tenant = 100000\n")
        dep.write_tenants(acme={"park_after_s": 0, "requests_per_s": 1000, "request_burst": 5000},
                          beta={"requests_per_s": 1000, "request_burst": 5000})
        dep.set_credentials(model.env)
        service = Service(dep, "bench").start(timeout=120)
        started.append(service)
        acme, beta = service.client("acme"), service.client("beta")
        try:
            firsts = []
            for i in range(a.starts):
                t0 = time.monotonic()
                beta.post("/v1/runs", json={"ask": f"首启-{i}", "options": {"clarify_only": True}})
                firsts.append(clock.after(f"首启-{i}", t0))
            first = statistics.median(firsts)
            print(f"first start, submit → first model request: median {first:.2f} s ({a.starts} runs)")

            lost = []
            for i in range(a.losses):
                tag = f"丢失-{i}"
                run_id = beta.post("/v1/runs", json={"ask": tag, "options": {"clarify_only": True}}).json()["id"]
                wait_question(beta, run_id, 120)
                t0 = time.monotonic()
                for pid in marked_pids(run_id):
                    subprocess.run(["kill", "-9", str(pid)], capture_output=True)
                lost.append(clock.after(tag, t0))
            loss = statistics.median(lost)
            print(f"loss, every process SIGKILLed → the resumed step's first model request: median {loss:.2f} s "
                  f"({a.losses} losses) = {loss / first:.2f}× a first start")

            base_pss = pss_mb(service.proc.pid)  # type: ignore[union-attr]
            ids = [acme.post("/v1/runs", json={"ask": f"停放-{i}", "options": {"clarify_only": True}}).json()["id"]
                   for i in range(a.parked)]
            t0 = time.monotonic()
            for run_id in ids:
                wait_status(acme, run_id, ("parked",), timeout=3600)
            took = time.monotonic() - t0
            wait_for(lambda: not any(marked_pids(r) for r in ids[-20:]), 60, what="the parked runs' processes to end")
            left = sum(bool(marked_pids(r)) for r in ids)
            pss = pss_mb(service.proc.pid)  # type: ignore[union-attr]
            runs = dep.data / "runs"
            disk = [du_kb(runs / r) for r in ids[:20]]
            beyond = [du_kb(runs / r, exclude=dep.repos["acme"].name) for r in ids[:20]]
            print(f"{a.parked} runs parked in {took:.0f} s; processes left of them: {left}")
            print(f"service memory: PSS {base_pss:.1f} MB before, {pss:.1f} MB with {a.parked} parked: "
                  f"{(pss - base_pss) * 1024 / a.parked:.1f} KB per parked run")
            print(f"disk per parked run: {statistics.median(disk) / 1024:.2f} MB its whole folder, "
                  f"{statistics.median(beyond) / 1024:.2f} MB beyond its checkout (median of 20)")

            answered = ids[:a.answer]
            questions = {r: wait_question(acme, r, 60)["id"] for r in answered}
            t0 = time.monotonic()
            threads = [threading.Thread(target=lambda r=r: acme.post(
                f"/v1/runs/{r}/answers", json={"question_id": questions[r], "text": ANSWER})) for r in answered]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            waits = [clock.after(f"停放-{ids.index(r)}", t0, timeout=900) for r in answered]
            print(f"{len(answered)} parked runs answered at once → each one's next model request: "
                  f"p50 {pct(waits, 0.5):.2f} s ({pct(waits, 0.5) / first:.2f}× a first start), "
                  f"p99 {pct(waits, 0.99):.2f} s ({pct(waits, 0.99) / first:.2f}×), max_running {a.max_running}")
        finally:
            stop_services(started)


if __name__ == "__main__":
    main()

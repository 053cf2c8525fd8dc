"""K runs at once through the service: how many succeed, how long it takes, what memory each run holds.

    .venv/bin/python bench/load.py [--runs 50] [--backend local]

One ``python -m service`` (real SQLite registry, real git, the local backend's bubblewrap
sandboxes, the real CLI inside each run) and one scripted model. K clarify-only runs are
submitted at once; each asks its person one question and waits. While all K wait, the memory
of every run is read from /proc (PSS: shared pages split among the processes sharing them, so
the sum is what the machine holds) and split by process: bubblewrap and its shell, the run's
Python (entrypoint, flower, the SDK), the CLI. Then every question is answered and the runs
end. Prints K, successes, wall, memory; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "service")]

from _service_helpers import Deployment, Service, serve  # noqa: E402
from flower.testing import Rule, ScriptedModel, say, tool  # noqa: E402
from sandbox.testing import ASK, BRIEF, CLARIFIER  # noqa: E402

# containers reach the scripted model on the host's loopback (as tests/service/test_service_docker.py)
DOCKER = 'network_mode = "host"\n'
DONE = ("succeeded", "failed", "aborted", "cancelled")


def rules(k: int) -> list[Rule]:
    out: list[Rule] = []
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
        sids = {sid for sid, cmd in procs.values() if f"{run_id}/spec.json" in cmd}
        per: dict[str, int] = defaultdict(int)
        for pid, (sid, cmd) in procs.items():
            if sid in sids:
                per[_kind(cmd)] += _pss_kb(pid)
        out[run_id] = dict(per)
    return out


def main(k: int, backend: str, timeout: float) -> None:
    with tempfile.TemporaryDirectory(prefix="flower-bench-load-") as tmp, ScriptedModel(rules(k)) as model:
        deployment = Deployment(Path(tmp), quota=k, max_running=k, backend=backend,
                                extra_config=DOCKER if backend == "docker" else "")
        services: list[Service] = []
        service = serve(deployment, services, model, timeout=600)  # a first Docker start may build the image
        try:
            acme = service.client("acme")
            t0 = time.perf_counter()
            ids = []
            for i in range(k):
                r = acme.post("/v1/runs", json={"ask": f"负载{i:03d} 做一个 hello 程序", "options": {"clarify_only": True}})
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
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
            mem = memory(list(questions))
            for run_id, qid in questions.items():
                acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": qid, "text": "Python"})
            while time.monotonic() < deadline:
                status = {i: acme.get(f"/v1/runs/{i}").json()["status"] for i in ids}
                if all(s in DONE for s in status.values()):
                    break
                time.sleep(0.3)
            wall = time.perf_counter() - t0
            errors = [acme.get(f"/v1/runs/{i}").json().get("error") for i in ids if status.get(i) != "succeeded"]
        finally:
            for s in services:
                s.stop()
    ok = sum(1 for s in status.values() if s == "succeeded")
    load = os.getloadavg()
    print(f"{k} runs at once, {backend} backend, clarify-only (one question each); load {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}; {os.cpu_count()} CPUs")
    print(f"successes {ok}/{k}   submitted in {submitted:.1f}s   all asking at {all_waiting:.1f}s   "
          f"wall {wall:.1f}s ({wall / k:.2f}s per run)")
    totals = [sum(m.values()) for m in mem.values() if m]
    if totals:
        kinds = sorted({kind for m in mem.values() for kind in m})
        print(f"memory per waiting run (PSS, {len(totals)} runs): median {statistics.median(totals) / 1024:.0f} MiB, "
              f"max {max(totals) / 1024:.0f} MiB, all runs {sum(totals) / 1024:.0f} MiB")
        for kind in kinds:
            xs = [m.get(kind, 0) for m in mem.values() if m]
            print(f"    {kind:34s} median {statistics.median(xs) / 1024:6.0f} MiB")
    for e in [e for e in errors if e][:5]:
        print(f"failed: {e}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--backend", choices=["local", "docker"], default="local")
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    main(a.runs, a.backend, a.timeout)

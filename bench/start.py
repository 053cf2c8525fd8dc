"""Where a run's start goes: ``POST /v1/runs`` to the run's first model request, phase by phase.

    .venv/bin/python bench/start.py [--runs 10] [--backend local|docker]

One process, one scripted model, alternating: the bare CLI (``claude -p`` spawned to its first
request: the floor), ``python -c pass`` and the imports the entrypoint's path needs (spawned to
exit), a clarify-only run through a cold service and one through a warm one (``warm = 1``: the run
claims a sandbox started ahead, ``sandbox/pool.py``, whose first step's CLI is already spawned and takes
the run's first step) and one through the warm service whose options differ from the ones its CLI was
spawned with (``timeout_s``: the CLI is respawned — the fallback's cost) — each the real ``python -m
service``, real git, the chosen backend, the real CLI inside. Before every run the warm pool is full again and has been
idle a moment, so its refill does not slow the run measured. The run's phases are read from what
the service and the run leave anyway, all on this host's clock:

    submit → picked      POST sent → the scheduler's ``run.starting`` log line
    worktree + spec      → spec.json written (checkout, env file, spec; warm: the spec is the claim)
    sandbox start        → ``run.started`` (backend.start returned: bwrap spawned / container started)
    python + imports     → the run's first events.jsonl line ("sandbox started", Runtime built)
    SDK + CLI + request  → the first request at the scripted model
    claim → first request  spec.json written → the first request (warm: the floor the issue names)

Every figure is printed as a median over ``--runs`` and as a ratio to the bare CLI of the same
run. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "service")]

from _service_helpers import Deployment, Service, serve, wait_status  # noqa: E402
from flower.testing import Request, Rule, ScriptedModel, say  # noqa: E402
from sandbox.layout import RunLayout  # noqa: E402
from sandbox.testing import BRIEF  # noqa: E402

# containers reach the scripted model on the host's loopback (as tests/service/test_service_docker.py)
DOCKER = 'network_mode = "host"\n'
IMPORTS = "import sandbox.entrypoint, flower.workflow, flower.core.runtime, flower.core.channel, claude_agent_sdk"


class Stamps:
    """The wall time of the first request of each conversation, by a tag in its first prompt."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self._lock = threading.Lock()

    def rule(self) -> Rule:
        def answer(req: Request) -> Any:
            m = re.search(r"\b(?:bare|runcold|runwarm|runrespawn)\d+\b", req.prompt)
            tag = m.group(0) if m else ""
            with self._lock:
                self.first.setdefault(tag, time.time())
            return say(BRIEF)

        return Rule(answer, repeat=True)

    def wait(self, tag: str, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if tag in self.first:
                return self.first[tag]
            time.sleep(0.005)
        raise TimeoutError(f"no model request for {tag} in {timeout:.0f}s")


def cli_path() -> str:
    import claude_agent_sdk

    return str(Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude")


def bare_cli(model: ScriptedModel, stamps: Stamps, tag: str, home: Path) -> float:
    """``claude -p`` spawned to its first request (then left to finish)."""
    env = {**os.environ, **model.env, "HOME": str(home)}
    t = time.time()
    proc = subprocess.Popen([cli_path(), "-p", f"{tag} hi"], cwd=home, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = stamps.wait(tag) - t
    proc.wait(60)
    return first


def spawn(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return time.perf_counter() - t


def _ts(line: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00")).timestamp()


def one_run(service: Service, stamps: Stamps, tag: str, runs_root: Path,
            options: dict[str, Any]) -> dict[str, float]:
    """One clarify-only run's phases; a warm service's run must have claimed a waiting sandbox."""
    client = service.client("acme")
    t0 = time.time()
    r = client.post("/v1/runs", json={"ask": f"{tag} 做一个 hello 程序", "options": options})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    first = stamps.wait(tag)
    wait_status(client, run_id, ("succeeded", "failed", "aborted", "cancelled"))
    lines = {ln.get("event"): ln for ln in service.lines() if ln.get("run") == run_id}
    folder = lines["run.started"].get("warm")
    if service.deployment.config.read_text().count("warm = 1"):
        assert folder, "the warm service's run started cold: the pool was empty"
    layout = RunLayout(runs_root, run_id, "acme", folder=folder or "")
    spec_at = layout.spec_file.stat().st_mtime
    events = [json.loads(x) for x in layout.events.read_text().splitlines() if x.strip()]
    sandbox_at = next(e["at"] for e in events if (e.get("payload") or {}).get("subtype") == "sandbox")
    prespawn = [e["payload"] for e in events if (e.get("payload") or {}).get("subtype") == "prespawn"]
    if folder:
        want = "respawn" not in tag
        assert prespawn and prespawn[0]["taken"] is want, (tag, prespawn)
    picked, started = _ts(lines["run.starting"]), _ts(lines["run.started"])
    return {
        "claim → first request": first - spec_at,
        "submit → picked": picked - t0,
        "worktree + env + spec": spec_at - picked,
        "sandbox start": started - spec_at,
        "python + imports + Runtime": sandbox_at - started,
        "SDK + CLI start + request": first - sandbox_at,
        "total: submit → first request": first - t0,
    }


def pool_full(runs: Path, backend: str, idle_s: float = 3.0) -> None:
    """Until the warm service's sandboxes (one per tenant) wait again, then ``idle_s`` more: their imports done."""
    from sandbox.backends import DockerBackend, LocalBackend

    b = LocalBackend(root=runs) if backend == "local" else DockerBackend("unused")
    deadline = time.monotonic() + 120
    while len([f for f in b.slots() if f.parent == runs.resolve()]) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError("the warm pool did not refill in 120 s")
        time.sleep(0.05)
    time.sleep(idle_s)


def main(n: int, backend: str) -> None:
    stamps = Stamps()
    phases: dict[str, dict[str, list[float]]] = {"cold": {}, "warm": {}, "respawn": {}}
    options = {"cold": {"clarify_only": True}, "warm": {"clarify_only": True},
               "respawn": {"clarify_only": True, "timeout_s": 900}}  # the CLI ahead was spawned for 1800 s
    floors: dict[str, list[float]] = {"bare CLI: claude -p → first request": [], "python -c pass": [],
                                      "python: the entrypoint's imports": []}
    extra = DOCKER if backend == "docker" else ""
    with tempfile.TemporaryDirectory(prefix="flower-bench-start-") as tmp, ScriptedModel([stamps.rule()]) as model:
        root = Path(tmp)
        services: list[Service] = []
        deployments = {kind: Deployment(root / kind, quota=2 * n + 1, max_running=2 * n + 1, backend=backend,
                                        extra_config=extra + ("warm = 1\n" if kind == "warm" else ""))
                       for kind in ("cold", "warm")}
        try:
            started = {kind: serve(d, services, model, name=kind, timeout=600)  # a first Docker start may build
                       for kind, d in deployments.items()}
            (root / "home").mkdir()
            warm_runs = deployments["warm"].data / "runs"
            for i in range(n):  # alternating, so a busy machine slows every side alike
                bare = bare_cli(model, stamps, f"bare{i}", root / "home")
                floors["bare CLI: claude -p → first request"].append(bare)
                floors["python -c pass"].append(spawn("pass"))
                floors["python: the entrypoint's imports"].append(spawn(IMPORTS))
                for kind in phases:
                    pool_full(warm_runs, backend)
                    on = "cold" if kind == "cold" else "warm"
                    for k, v in one_run(started[on], stamps, f"run{kind}{i}", deployments[on].data / "runs",
                                        options[kind]).items():
                        phases[kind].setdefault(k, []).append(v)
        finally:
            for s in services:
                s.stop()
    cli = statistics.median(floors["bare CLI: claude -p → first request"])
    load = os.getloadavg()
    print(f"start of a clarify-only run, {backend} backend, median of {n}; load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'phase':46s} {'median':>9s} {'min':>9s} {'/ bare CLI':>11s}")
    rows = [*floors.items(), *((f"{kind}: {k}", v) for kind, ph in phases.items() for k, v in ph.items())]
    for name, xs in rows:
        med = statistics.median(xs)
        print(f"{name:46s} {med * 1000:7.0f}ms {min(xs) * 1000:7.0f}ms {med / cli:10.2f}x")
    cold, warm, again = (statistics.median(phases[k]["total: submit → first request"])
                         for k in ("cold", "warm", "respawn"))
    print(f"warm / cold total: {warm / cold:.2f}x; a respawn on differing options costs "
          f"{(again - warm) * 1000:.0f} ms over a warm start ({again / warm:.2f}x)")
    claim = statistics.median(phases["warm"]["claim → first request"])
    print(f"warm claim → first request {claim * 1000:.0f} ms beside the bare CLI's start {cli * 1000:.0f} ms "
          f"({claim / cli:.2f}x); target <= 50 ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--backend", choices=["local", "docker"], default="local")
    a = ap.parse_args()
    main(a.runs, a.backend)

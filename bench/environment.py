"""What a team's environment costs a run's start, measured on ``python -m service`` (Docker backend, the real CLI, one
scripted model), beside flower's own image in the same run.

    .venv/bin/python bench/environment.py [--runs 3]

Submit → the run's first model request, median of ``--runs``:

1. flower's own image, a cold start (the baseline);
2. a team's Node image whose setup installs ``@team/greet`` from a real npm registry on 127.0.0.1 (verdaccio)
   through the tenant's allow-list (squid): the first time (setup, scan, commit), then from the prepared image;
3. both again with ``warm = 1`` (a sandbox started ahead, in the team's prepared environment for the team).
Prints each figure and its ratio to the baseline. No timings in tests: this is where they are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "service"), str(ROOT / "bench")]

from _registries import serving_npm_registry  # noqa: E402
from _service_helpers import Deployment, Service, git, stop_services  # noqa: E402
from _team_images import team_image  # noqa: E402
from flower.testing import Rule, ScriptedModel  # noqa: E402
from resume import Clock  # noqa: E402
from sandbox.testing import CLARIFIER  # noqa: E402

HOST = "npm.team.test"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    clock = Clock()
    started: list[Service] = []
    with tempfile.TemporaryDirectory(prefix="flower-bench-env-") as tmp, \
            serving_npm_registry(Path(tmp) / "npm") as registry, \
            ScriptedModel([Rule(clock.ask, system=CLARIFIER, repeat=True)]) as model:
        root = Path(tmp)
        (root / "hosts").write_text(f"127.0.0.1 {HOST}\n")
        dep = Deployment(root / "dep", backend="docker", max_running=8,
                         extra_config=f'network_mode = "host"\negress_internal = ["127.0.0.1/32"]\n'
                                      f'egress_hosts_file = "{root / "hosts"}"\n')
        repo = dep.repos["acme"]
        (repo / "package.json").write_text(json.dumps({"name": "app", "version": "1.0.0", "private": True,
                                                       "dependencies": {"@team/greet": "1.0.0"}}))
        (repo / ".npmrc").write_text(f"@team:registry=http://{HOST}:{registry.port}/\n"
                                     f"//{HOST}:{registry.port}/:_authToken=${{NPM_TOKEN}}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "deps")
        secrets = root / "dep" / "secrets" / "acme.setup.env"
        secrets.write_text(f"NPM_TOKEN={registry.token}\n")
        dep.write_tenants(acme={"image": team_image("node"), "setup": ["npm install --no-audit --no-fund"],
                                "setup_secrets_file": str(secrets), "egress": [f"{HOST}:{registry.port}"],
                                "quota": 8}, beta={"quota": 8})
        dep.set_credentials(model.env)
        def start(client: httpx.Client, tag: str) -> float:
            """Submit → the run's first model request; the run is cancelled then (it would hold a slot)."""
            t0 = time.monotonic()
            run_id = client.post("/v1/runs", json={"ask": tag, "options": {"clarify_only": True}}).json()["id"]
            took = clock.after(tag, t0, timeout=1200)
            client.post(f"/v1/runs/{run_id}/cancel", params={"wait": 30})
            return took

        service = Service(dep, "bench").start(timeout=900)
        started.append(service)
        acme, beta = service.client("acme"), service.client("beta")


        try:
            start(beta, "预热")  # the sandbox image and the runtime volume exist before anything is measured
            base = statistics.median(start(beta, f"冷启-{i}") for i in range(a.runs))
            print(f"flower's image, cold: submit → first model request: median {base:.2f} s ({a.runs} runs)")
            first = start(acme, "首次准备")
            print(f"team's Node image, first time (setup: npm install through the allow-list, scan, commit): "
                  f"{first:.2f} s = {first / base:.2f}×")
            prepared = statistics.median(start(acme, f"已准备-{i}") for i in range(a.runs))
            print(f"team's Node image, prepared (no setup): median {prepared:.2f} s = {prepared / base:.2f}×")
        finally:
            stop_services(started)
        dep.config.write_text(dep.config.read_text() + "warm = 1\n")
        service = Service(dep, "bench-warm").start(timeout=300)
        started = [service]
        acme, beta = service.client("acme"), service.client("beta")
        try:
            start(acme, "再准备")  # this service's first acme run finds the prepared image; then sandboxes wait in it
            for name, client in (("flower's image", beta), ("team's Node image, prepared", acme)):
                warm = []
                for i in range(a.runs):
                    time.sleep(20)  # the pool tops up (one waiting sandbox per tenant's repository)
                    warm.append(start(client, f"热启-{name}-{i}"))
                w = statistics.median(warm)
                print(f"{name}, warm (a sandbox started ahead): median {w:.2f} s = {w / base:.2f}×")
        finally:
            stop_services(started)
            import docker

            engine = docker.from_env()
            for image in engine.images.list(name="flower-env/acme"):
                for c in engine.containers.list(all=True, filters={"ancestor": image.id}):
                    c.remove(force=True)
                engine.images.remove(image.id, force=True)


if __name__ == "__main__":
    main()

"""One tenant floods the API; what another tenant sees. Two replicas of ``python -m service`` on one PostgreSQL
registry (a throwaway server, as bench/registry.py starts it), one scripted model.

    .venv/bin/python bench/flood.py [--threads 30] [--seconds 20] [--rate 10 --burst 20 --cap 8]

The quiet tenant lists its runs on both replicas (a read every 50 ms) and starts a clarify-only run; then the
flooder's process (30 threads, each submitting and listing again and again on one replica or the other,
ignoring Retry-After) runs for ``--seconds`` while the quiet tenant reads and starts another run. Prints the quiet
tenant's ``GET /v1/runs`` p50 quiet and flooded and their ratio, its start quiet and flooded, and what the flooder
was answered (the 429s) and the most runs it had queued. ``--rate``, ``--burst``, ``--cap``: the flooder's
``requests_per_s``, ``request_burst`` and ``max_queued`` in the tenants file (left out: the service's defaults).
The scenario is tests/service/_flood.py's, which tests/service/test_tenant_flood.py asserts on.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "service")]

from _flood import FLOODER, deployment, scenario  # noqa: E402
from _service_helpers import Service, stop_services  # noqa: E402
from flower.testing import Rule, ScriptedModel, tool  # noqa: E402
from sandbox.testing import ASK, CLARIFIER  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=30)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--rate", type=float, help="the flooder's requests_per_s (default: the service's)")
    p.add_argument("--burst", type=int, help="the flooder's request_burst (default: the service's)")
    p.add_argument("--cap", type=int, help="the flooder's max_queued (default: the service's)")
    a = p.parse_args()
    import _postgres

    server = _postgres.start_server("flower-bench-flood-")
    services: list[Service] = []
    try:
        with tempfile.TemporaryDirectory(prefix="flower-bench-flood-") as tmp:
            root = Path(tmp)
            url = server.url(server.fresh(migrated=True))
            dep = deployment(root, url, limits="")
            limits: dict[str, Any] = {k: v for k, v in (("requests_per_s", a.rate), ("request_burst", a.burst),
                                                        ("max_queued", a.cap)) if v is not None}
            dep.write_tenants(**{FLOODER: limits})
            with ScriptedModel([Rule(tool(ASK, {"question": "等着"}), system=CLARIFIER, repeat=True)]) as model:
                dep.set_credentials(model.env)
                for name in ("r1", "r2"):
                    services.append(Service(dep, name, env={"FLOWER_SERVICE_REPLICA": name}).start(timeout=180))
                figures = scenario(root, url, services, threads=a.threads, seconds=a.seconds)
                stop_services(services)
                services.clear()
    finally:
        stop_services(services)
        _postgres.stop_server(server)
    print(f"flood: {a.threads} threads for {a.seconds:g} s on 2 replicas (PostgreSQL); the flooder's limits: "
          + (", ".join(f"{k} = {v}" for k, v in limits.items()) or "the service's defaults"))
    for line in figures.lines():
        print(line)


if __name__ == "__main__":
    main()

"""How long a tenant's ``run.ended`` takes to reach its receiver while another tenant's receiver trickles every
answer (a byte every 2 s, each well within a read timeout) — quiet (no trickling tenant) against trickling, with
the tenant's share of the slots (the defaults) and without it (``tenant_slots = slots``), in one run.

    .venv/bin/python -m bench.webhooks [--noisy 20] [--deliveries 4]

Real receivers on 127.0.0.1 (the tests' ``Trickler`` and ``Receiver``), a SQLite registry, ``service.results.webhooks``
as the service runs it. The quiet tenant's deliveries are queued at once (one per run); prints the median and the
most seconds from queued to received, and their ratio to quiet; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "service")]

from _service_helpers import Deployment  # noqa: E402
from service.logging import configure_logging  # noqa: E402
from service.registry import Registry  # noqa: E402
from service.tenants import Tenants  # noqa: E402
from service.results.webhooks import SLOTS, TENANT_SLOTS, Webhooks  # noqa: E402
from test_results import Receiver  # noqa: E402
from test_webhooks_fair import Trickler, _hooked  # noqa: E402


async def one(root: Path, *, noisy: int, deliveries: int, slots: int, tenant_slots: int) -> list[float]:
    """Seconds from queued to received of each of the quiet tenant's ``deliveries``, queued at once, while ``noisy``
    runs of the other tenant wait on a receiver that trickles."""
    trickler, receiver = Trickler(hold=600, every=2), Receiver()
    deployment = Deployment(root)
    _hooked(deployment, acme=trickler.url, beta=receiver.url)
    registry = Registry(root / "registry.sqlite3")
    hooks = Webhooks(registry.deliveries, Tenants(deployment.root / "tenants.toml"), retry_s=1.0, slots=slots,
                     tenant_slots=tenant_slots)
    await hooks.start()
    queued: dict[str, float] = {}
    try:
        for i in range(noisy):
            run = registry.runs.create(id=f"20260101-0000{i % 60:02d}-{i:032x}", tenant="acme", ask="a", options={},
                                       repo="/r")
            hooks.emit("run.started", run)
        while noisy and trickler.open < min(noisy, tenant_slots, slots):
            await asyncio.sleep(0.01)
        for i in range(deliveries):
            run = registry.runs.create(id=f"20260101-0100{i:02d}-" + f"{i:x}" * 32, tenant="beta", ask="a", options={},
                                       repo="/r")
            queued[f"{run.id}.run.ended"] = time.monotonic()
            hooks.emit("run.ended", run)
        took: dict[str, float] = {}
        while len(took) < deliveries:
            for g in receiver.got:
                took.setdefault(g["delivery"], time.monotonic() - queued[g["delivery"]])
            await asyncio.sleep(0.005)
    finally:
        await hooks.stop()
        registry.close()
        trickler.close()
        receiver.server.shutdown()
    return list(took.values())


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser()
    args.add_argument("--noisy", type=int, default=20, help="runs of the trickling tenant waiting")
    args.add_argument("--deliveries", type=int, default=4, help="the quiet tenant's run.ended, queued at once")
    a = args.parse_args(argv)
    configure_logging("console", level="ERROR")
    cases = {"quiet (no trickling tenant)": (0, SLOTS, TENANT_SLOTS),
             f"trickling, tenant share {TENANT_SLOTS} of {SLOTS}": (a.noisy, SLOTS, TENANT_SLOTS),
             f"trickling, no share ({SLOTS} of {SLOTS})": (a.noisy, SLOTS, SLOTS)}
    medians, most = {}, {}
    for name, (noisy, slots, share) in cases.items():
        with tempfile.TemporaryDirectory() as tmp:
            took = asyncio.run(one(Path(tmp), noisy=noisy, deliveries=a.deliveries, slots=slots, tenant_slots=share))
        medians[name], most[name] = statistics.median(took), max(took)
        print(f"{name:36} run.ended received after {medians[name]:7.3f} s median, {most[name]:7.3f} s most "
              f"({len(took)} deliveries)", flush=True)
    quiet = next(iter(cases))
    for name in list(cases)[1:]:
        print(f"{name:36} {medians[name] / medians[quiet]:7.1f}× quiet's median, "
              f"{most[name] / most[quiet]:7.1f}× quiet's most")
    return 0


if __name__ == "__main__":
    sys.exit(main())

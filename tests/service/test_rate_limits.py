"""``RateLimits``: each tenant's token bucket, on a clock the test moves — a burst, then the rate; one tenant's
pace is never another's; the tenants file's numbers override the service's; a refusal says when to come back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.api import limits
from service.api.limits import RateLimits
from service.clock import ManualClock
from service.config import ServiceConfig
from service.tenants import Tenant


def tenant(name: str, **over: object) -> Tenant:
    return Tenant(name=name, token_hash="0" * 64, repo="/r", credentials="/c", quota=1,
                  allowed_options=frozenset(), **over)  # type: ignore[arg-type]


def test_a_tenant_gets_its_burst_then_its_rate_and_never_another_tenants(tmp_path: Path) -> None:
    clock = ManualClock()
    cfg = ServiceConfig(data_dir=str(tmp_path), tenants="t.toml", requests_per_s=2.0, request_burst=5)
    rl = RateLimits(cfg, clock=clock)
    acme, beta = tenant("acme"), tenant("beta")
    assert [rl.take(acme) for _ in range(5)] == [None] * 5
    refused = rl.take(acme)
    assert refused is not None and refused.retry_after_s == 1 and "tenant acme" in refused.sentence("acme")
    assert rl.take(beta) is None, "beta's bucket is its own"
    clock.advance(0.5)  # one more token at 2 a second
    assert rl.take(acme) is None and rl.take(acme) is not None


def test_the_tenants_file_overrides_the_services_rate_and_burst(tmp_path: Path) -> None:
    clock = ManualClock()
    cfg = ServiceConfig(data_dir=str(tmp_path), tenants="t.toml", requests_per_s=100.0, request_burst=100)
    rl = RateLimits(cfg, clock=clock)
    slow = tenant("slow", requests_per_s=0.1, request_burst=1)
    assert rl.take(slow) is None
    refused = rl.take(slow)
    assert refused is not None and refused.retry_after_s == 10 and refused.burst == 1


def test_a_refusal_is_held_a_second_but_only_so_many_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    monkeypatch.setattr(limits, "HOLD_S", 0.2)
    monkeypatch.setattr(limits, "HELD", 3)
    cfg = ServiceConfig(data_dir=str(tmp_path), tenants="t.toml", requests_per_s=0.01, request_burst=1)
    rl = RateLimits(cfg)
    acme = tenant("acme")

    async def flood() -> list[float]:
        loop = asyncio.get_running_loop()

        async def one() -> float:
            t0 = loop.time()
            await rl.pace(acme)
            return loop.time() - t0

        return list(await asyncio.gather(*(one() for _ in range(6))))

    took = sorted(asyncio.run(flood()))
    assert sum(t >= 0.2 for t in took) == 3, took  # three held; the first passed, two more answered at once

"""Each tenant's pace at the API: a token bucket per tenant, so one tenant's flood of requests is refused cheaply
(a 429 with ``Retry-After``, before any database read) instead of slowing every other tenant's.

A refused request is answered after ``HOLD_S`` (Retry-After's least), not at once: a client that ignores
Retry-After and sends again at once — a loop, a script, a flood of threads — is paced by its own connections, so
its refusals cost the replica a few a second instead of thousands. At most ``HELD`` of a tenant's requests wait
so on a replica at once (a socket and a timer each); past that a refusal is answered at once.

The buckets live in this replica's memory: a tenant reaching N replicas gets N times its rate, and a restart fills
its bucket again. That is enough for what it is for — one replica's event loop and database connections shared
fairly — and needs no write per request; the cap on a tenant's queued runs (``service.control.admission``) is the bound
that holds across replicas.
"""

from __future__ import annotations

import asyncio
import math
import threading
from dataclasses import dataclass

from ..clock import SYSTEM, Clock
from ..config import ServiceConfig
from ..tenants import Tenant

__all__ = ["RateLimits", "Paced", "HOLD_S", "HELD"]

HOLD_S = 1.0
HELD = 32


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass(frozen=True)
class Paced:
    """A request refused: the tenant's rate and burst, and how long until its next request is taken."""
    rate: float
    burst: int
    retry_after_s: int

    def sentence(self, tenant: str) -> str:
        return (f"tenant {tenant} sent more than {self.burst} requests at once or more than {self.rate:g} a second "
                f"(its limit on this replica): nothing was done; wait {self.retry_after_s} s (Retry-After) and send "
                "fewer requests, e.g. one stream (GET …/events) instead of polling")


class RateLimits:
    """The per-tenant buckets: ``requests_per_s`` and ``request_burst`` from the tenant, else from the config."""

    def __init__(self, config: ServiceConfig, clock: Clock = SYSTEM) -> None:
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._held: dict[str, int] = {}

    async def pace(self, tenant: Tenant) -> Paced | None:
        """``take``; a refusal is returned after ``HOLD_S`` while the tenant has fewer than ``HELD`` waiting."""
        paced = self.take(tenant)
        if paced is None or self._held.get(tenant.name, 0) >= HELD:
            return paced
        self._held[tenant.name] = self._held.get(tenant.name, 0) + 1
        try:
            await asyncio.sleep(HOLD_S)
        finally:
            self._held[tenant.name] -= 1
        return paced

    def take(self, tenant: Tenant) -> Paced | None:
        """One request of ``tenant``: None when it may go on, else why not and for how long."""
        rate = tenant.requests_per_s or self.config.requests_per_s
        burst = tenant.request_burst or self.config.request_burst
        now = self._clock.monotonic()
        with self._lock:
            bucket = self._buckets.get(tenant.name)
            if bucket is None:
                bucket = self._buckets[tenant.name] = _Bucket(float(burst), now)
            bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * rate)
            bucket.at = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return None
            return Paced(rate, burst, max(1, math.ceil((1.0 - bucket.tokens) / rate)))

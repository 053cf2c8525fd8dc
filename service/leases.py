"""Which live runs this replica follows: one lease per run in the registry (``Registry.take``), its generation the
fencing token every write of the run carries (``LiveRun.lease``).

A thread of its own renews this replica's leases every quarter of ``ttl``, however long a pass takes (a pass on a
loaded machine may outlast a lease), and with them whatever else must stay alive while this replica does
(``also``: its stream slots, its gateway's budget holds). Each pass then asks ``changes``: the runs the last renewal
no longer held — another replica took them: forget them, no write, no stop, no removal — and the live runs no
replica holds — their replica stopped: take them over and re-attach.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .backoff import RepeatLog
from .live import LiveRuns
from .registry import Lease, Registry

__all__ = ["Leases", "Changes"]


@dataclass(frozen=True)
class Changes:
    lost: tuple[str, ...]
    """Runs this replica followed that another holds now."""
    orphans: tuple[str, ...]
    """Live runs no replica holds (their lease ran out), not followed here."""


class Leases:
    def __init__(self, registry: Registry, owner: str, ttl: float, live: LiveRuns, errors: RepeatLog, *,
                 also: Callable[[], None] = lambda: None) -> None:
        self.registry = registry
        self.owner = owner
        self.ttl = ttl
        self._live = live
        self._errors = errors
        self._also = also
        self._held: tuple[float, dict[str, Lease]] = (0.0, {})  # the renewer's last round: when, and what it kept
        self._looked = 0.0
        self._stopping = threading.Event()

    def start(self) -> None:
        self._stopping.clear()
        threading.Thread(target=self._renew, name="flower-lease-renewer", daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()

    def hold(self, run_id: str) -> bool:
        """Take ``run_id``'s lease for this replica (it follows the run from now on); False when another holds it."""
        lease = self.registry.take(run_id, self.owner, ttl=self.ttl, now=time.time())
        if lease is None:
            return False
        self._live.of(run_id).lease = lease
        return True

    def taken(self, run_id: str) -> bool:
        """True when this replica followed ``run_id`` and another holds it now (asked of the registry at once)."""
        live = self._live.get(run_id)
        if live is None or live.lease is None:
            return False
        return self.registry.renew(self.owner, ttl=self.ttl, now=time.time()).get(run_id) is None

    def changes(self) -> Changes | None:
        """Every quarter of ``ttl`` (None between): what the renewals found, the renewed leases put on the runs."""
        now = time.time()
        if now - self._looked < self.ttl / 4:
            return None
        self._looked = now
        at, held = self._held
        lost = []
        for live in list(self._live):
            if live.lease is None:
                continue
            if live.id in held:
                live.lease = held[live.id]
            elif at and live.lease.expires <= at + self.ttl:  # taken before that round, and not kept
                lost.append(live.id)
        orphans = tuple(r for r in self.registry.unheld(now=now) if r not in self._live)
        return Changes(tuple(lost), orphans)

    def _renew(self) -> None:
        while not self._stopping.wait(self.ttl / 4):
            now = time.time()
            try:
                self._held = (now, self.registry.renew(self.owner, ttl=self.ttl, now=now))
                self._also()
            except Exception as e:  # noqa: BLE001 - the database away: the leases run out, another replica takes over
                self._errors.error("scheduler.renew_failed", "renew", e)

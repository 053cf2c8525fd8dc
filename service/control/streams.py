"""Each tenant's open SSE streams, capped at ``max_streams_per_tenant`` across every replica on one registry.

A stream takes a numbered slot of its tenant's in the registry (``Registry.take_stream``: the slot number is part of
the primary key, so the cap holds however many replicas open streams at once) and gives it back when it ends; the
replica renews its open streams' slots with its leases, so the slots of a replica that died free themselves within
``lease_s`` — or at once when it starts again under its name. ``open`` counts this replica's streams per tenant
(the metrics' gauge).
"""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from dataclasses import dataclass

from ..clock import SYSTEM, Clock
from ..registry import StreamsTable

__all__ = ["StreamSlots", "Slot"]


@dataclass(frozen=True)
class Slot:
    tenant: str
    number: int
    holder: str


class StreamSlots:
    def __init__(self, streams: StreamsTable, replica: str, *, ttl: float, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.streams = streams
        self.replica = replica
        self.ttl = ttl
        self._held: dict[str, Slot] = {}
        self._lock = threading.Lock()

    def take(self, tenant: str, cap: int) -> Slot | None:
        """Blocking (a worker thread): a slot of ``tenant``'s, or None when it has ``cap`` streams open already."""
        holder = f"{self.replica} {secrets.token_hex(8)}"
        number = self.streams.take(tenant, holder, replica=self.replica, cap=cap, now=self.clock.now(),
                                           ttl=self.ttl)
        if number is None:
            return None
        slot = Slot(tenant, number, holder)
        with self._lock:
            self._held[holder] = slot
        return slot

    @property
    def open(self) -> Counter[str]:
        """This replica's open streams per tenant."""
        with self._lock:
            return Counter(slot.tenant for slot in self._held.values())

    def reset(self) -> None:
        """Blocking, at start: the slots this replica's last self held are let go (its streams died with it). On
        SQLite every slot: there is one replica, whatever its host's name is now."""
        self.streams.release_all(self.replica if self.streams.shared else None)

    def give_back(self, slot: Slot) -> None:
        """Blocking: the stream ended, however it ended."""
        with self._lock:
            if self._held.pop(slot.holder, None) is None:
                return
        self.streams.give_back(slot.tenant, slot.number, slot.holder)

    def renew(self) -> None:
        """Blocking (the lease renewer's thread): every slot this replica holds, kept for another ``ttl``."""
        with self._lock:
            holders = list(self._held)
        self.streams.renew(holders, now=self.clock.now(), ttl=self.ttl)

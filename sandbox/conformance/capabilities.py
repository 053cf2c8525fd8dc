"""The capabilities a backend can be shown to have; what a backend claims is read off the protocols it implements."""

from __future__ import annotations

from enum import StrEnum

from ..backends.base import Backend, WarmBackend

__all__ = ["Capability", "claimed"]


class Capability(StrEnum):
    BASE = "base"
    """start, state, exit_code, stop, live, remove: stop writes "killed", a fresh instance re-finds the run, a
    trapped outbox is neither followed nor waited on."""
    WARM = "warm"
    """warm → slots lists it → claim → live maps it to the run → stop → slots empty; a waiting sandbox holds nothing
    of any run."""


def claimed(backend: Backend) -> frozenset[Capability]:
    found = {Capability.BASE}
    if isinstance(backend, WarmBackend):
        found.add(Capability.WARM)
    return frozenset(found)

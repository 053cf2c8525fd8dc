"""What every backend must do, by capability: a backend proves itself in a few lines.

    from sandbox.conformance import Capability, Harness, run_backend_conformance
    report = run_backend_conformance(Harness(lambda: LocalBackend(root=runs), repo=repo, root=runs))
    assert report.shown == {Capability.BASE, Capability.WARM}

In the spirit of langgraph's checkpoint-conformance: each capability has a spec module of its own (``base``,
``warm``) whose contracts are functions that raise AssertionError with what broke. The runner runs BASE for every
backend and each further capability the backend claims (``WarmBackend`` → WARM), and its ``Report`` says which
capabilities the backend was shown to have, and how: by real runs (the real CLI against a scripted model), or by a
harness that plays the run's side where nothing runs (``MemoryBackend``'s handler, a recorded Kubernetes API).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flower.testing import ScriptedModel

from ..backends.base import Backend
from ..layout import RunLayout
from ..testing import waiting_rules
from .capabilities import Capability, claimed

__all__ = ["Capability", "Contract", "Harness", "Report", "run_backend_conformance"]


@dataclass(frozen=True)
class Harness:
    """How to build the backend (each call a fresh instance over the same runs: a restarted service), where runs
    live, and — for a backend where nothing really runs — ``play``: what the run's process would write once
    started (its first event, its question)."""

    make: Callable[[], Backend]
    repo: Path
    root: Path
    play: Callable[[RunLayout], None] | None = None
    how: str = "real runs: the real CLI against a scripted model"


@dataclass(frozen=True)
class Report:
    backend: str
    shown: frozenset[Capability]
    how: str

    def __str__(self) -> str:
        return f"{self.backend}: {', '.join(sorted(c.value for c in self.shown))} ({self.how})"


Contract = Callable[[Harness, ScriptedModel], None]


def _specs() -> dict[Capability, list[Contract]]:
    from . import base, warm

    return {Capability.BASE: base.CONTRACTS, Capability.WARM: warm.CONTRACTS}


def run_backend_conformance(harness: Harness) -> Report:
    """Every contract of every capability the backend claims; the report of what it was shown to have."""
    backend = harness.make()
    capabilities = claimed(backend)
    specs = _specs()
    for capability in sorted(capabilities, key=lambda c: c.value):
        for contract in specs[capability]:
            with ScriptedModel(waiting_rules()) as model:
                contract(harness, model)
    report = Report(type(backend).__name__, frozenset(capabilities), harness.how)
    print(f"conformance: {report}")
    return report

"""What the two sides of a trace share: its ids, the finished ``Span`` and the ``Exporter`` seam.

The control plane and the gateway may be two processes (``gateway_process``) and never talk: both derive the ids of
a run's trace from what both know. The trace id and the run's span id are digests of the run id; an attempt's span
id is a digest of the run id and its CLI session (the gateway reads the session from the request's
``X-Claude-Code-Session-Id``, the control plane from the session's ``system/init`` event). A run can make its own
model calls land under another of its own attempts, never in another run's trace: the run id is the grant's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit


__all__ = ["Span", "Exporter", "Attribute", "trace_id_of", "span_id_of", "traces_url", "TRACES_PATH"]

TRACES_PATH = "/v1/traces"  # OTLP/HTTP's path for spans, appended to an endpoint that names none
Attribute = str | bool | int | float


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(("flower", *parts)).encode("utf-8", "replace")).digest()


def trace_id_of(run_id: str) -> str:
    """The run's trace id (32 hex digits), the same in every process of the service and on the run's API row."""
    return f"{_trace(run_id):032x}"


def _trace(run_id: str) -> int:
    return int.from_bytes(_digest("trace", run_id)[:16], "big") or 1


def span_id_of(*parts: str) -> int:
    """A span id both sides derive from the same names (``("run", run_id)``, ``("attempt", run_id, session)``)."""
    return int.from_bytes(_digest("span", *parts)[:8], "big") or 1


def traces_url(endpoint: str) -> str:
    """The URL spans are posted to: ``endpoint`` as the operator wrote it when it names a path, else with OTLP's
    ``/v1/traces`` appended (as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is read)."""
    parts = urlsplit(endpoint)
    return endpoint if parts.path.strip("/") else endpoint.rstrip("/") + TRACES_PATH


@dataclass(frozen=True)
class Span:
    """One finished span of a run's trace (times in seconds since the epoch)."""

    tenant: str
    run_id: str
    name: str
    span_id: int
    parent_id: int | None
    start: float
    end: float
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    error: str | None = None
    """Why it failed (its status is then ERROR), else None."""

    @property
    def trace_id(self) -> int:
        return _trace(self.run_id)


class Exporter(Protocol):
    """Where finished spans go; ``send`` never blocks nor raises (a span it cannot keep is dropped and counted)."""

    def send(self, span: Span) -> None:
        ...

    def close(self, timeout_s: float = 5.0) -> None:
        """What is queued is sent for at most ``timeout_s``; later spans are dropped."""
        ...

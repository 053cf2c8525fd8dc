"""Traces on or off, decided once per process: ``exporter_of`` is the only place that reads ``otlp_endpoint``, and the
only one that imports ``otlp`` (OpenTelemetry) — when an endpoint is set, never otherwise."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ServiceConfigError
from .export import Exporter, traces_url

if TYPE_CHECKING:
    from ..config import ServiceConfig
    from ..metrics import Metrics

__all__ = ["exporter_of"]


def exporter_of(config: ServiceConfig, metrics: Metrics, *, service: str = "flower") -> Exporter | None:
    """The process's exporter when ``otlp_endpoint`` is set, else None — and then OpenTelemetry is not imported."""
    if not config.otlp_endpoint:
        return None
    try:
        from .otlp import OtlpExporter  # only now: traces off never load the SDK
    except ImportError as e:
        raise ServiceConfigError(f"`otlp_endpoint` is set ({config.otlp_endpoint}) but OpenTelemetry cannot be "
                                 f"imported ({e}): install the traces extra, pip install 'flower-agents[traces]', "
                                 "or leave otlp_endpoint empty") from None
    return OtlpExporter(traces_url(config.otlp_endpoint), metrics.spans_dropped, service=service)

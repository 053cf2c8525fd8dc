"""OpenTelemetry traces of runs, sent over OTLP/HTTP to the operator's backend (``otlp_endpoint``; off when empty).

One trace per run: run → step → attempt (one CLI session of a step) → model call → tool call → subagent. Each
span is built from what the service's side of the wall sees, never from a span a run sends:

- ``runs``    the control plane (``service.control.feed``): the run, its steps and their attempts, from the run's
              events as the service reads them (their names and order; their times clamped to when they were
              read) and, at the end, the run's row (the gateway's metering: tokens and cost).
- ``wire``    the data plane (``service.gateway.forward``): a span per model call with its model, tokens and cost
              as the upstream reported them, a span per tool call the model asked for (closed when its result
              comes back on the wire: denied, spilled, its duration) and a span per subagent.
- ``export``  ids both sides agree on without talking (the trace id and the run's span id are digests of the run
              id, an attempt's of its session) and the ``Exporter`` seam.
- ``configured`` ``exporter_of``: the process's exporter, which imports OpenTelemetry (``otlp``) only when an
              endpoint is configured — traces off cost an ``if``.
- ``otlp``    the one module that imports OpenTelemetry: a bounded batch processor whose drops (a full queue, an
              endpoint that is down) are counted in ``flower_trace_spans_dropped_total``; a run never waits for it.
"""

from __future__ import annotations

from .configured import exporter_of
from .export import Exporter, Span, span_id_of, trace_id_of, traces_url
from .runs import RunSpans
from .wire import WireSpans

__all__ = ["Exporter", "Span", "exporter_of", "span_id_of", "trace_id_of", "traces_url", "RunSpans", "WireSpans"]

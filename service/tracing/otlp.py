"""The one module that imports OpenTelemetry (``export.exporter_of`` loads it only when traces are configured).

Spans are built finished (the service learns a span's start and end after the fact) and handed to the SDK's
``BatchSpanProcessor``, bounded: at most ``MAX_QUEUED`` wait, one thread posts them ``BATCH`` at a time over
OTLP/HTTP. Nothing here waits for the endpoint: a span past the bound is dropped at once, a batch the endpoint did
not take (down, refusing, too slow for ``TIMEOUT_S``) is dropped after its try, and both are counted per tenant
(``flower_trace_spans_dropped_total``). The tenant is each span's resource attribute (``flower.tenant``), one
``Resource`` per tenant kept for the process's life.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ..logging import get_logger
from .export import Span

__all__ = ["OtlpExporter", "MAX_QUEUED", "BATCH", "TIMEOUT_S", "DELAY_MS"]

MAX_QUEUED = 4096  # spans waiting to be sent, all tenants together; more are dropped (and counted)
BATCH = 512  # spans per OTLP request
TIMEOUT_S = 5.0  # one request's time, its retries included
DELAY_MS = 500  # how long a span may wait for its batch to fill

log = get_logger("flower.service.traces")
_SCOPE = InstrumentationScope("flower.service")


class _Counting(SpanExporter):
    """The OTLP exporter, with what it did not deliver counted (the processor's thread calls ``export``)."""

    def __init__(self, inner: SpanExporter, taken: Callable[[int], None],
                 dropped: Callable[[str, int], None]) -> None:
        self.inner, self.taken, self.dropped = inner, taken, dropped
        self._said = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.taken(len(spans))
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - an exporter's bug loses the batch, never the thread
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            for span in spans:
                tenant = span.resource.attributes.get("flower.tenant", "")
                self.dropped(str(tenant), 1)
            if not self._said:  # once per outage: a down endpoint would otherwise log every batch
                log.warning("traces.export_failed", spans=len(spans),
                            error="the OTLP endpoint did not take a batch of spans; they were dropped and counted "
                                  "(flower_trace_spans_dropped_total)")
            self._said = True
        else:
            self._said = False
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class OtlpExporter:
    """``export.Exporter`` over OTLP/HTTP to ``url`` (``…/v1/traces``)."""

    def __init__(self, url: str, dropped: Callable[[str, int], None], *, service: str = "flower") -> None:
        self.url, self.dropped, self.service = url, dropped, service
        self._lock = threading.Lock()
        self._queued = 0  # handed to the processor, not yet to the exporter: the processor's queue, counted here
        self._closed = False
        self._resources: dict[str, Resource] = {}
        inner = OTLPSpanExporter(endpoint=url, timeout=TIMEOUT_S)
        self._processor = BatchSpanProcessor(_Counting(inner, self._taken, dropped), max_queue_size=MAX_QUEUED,
                                             schedule_delay_millis=DELAY_MS, max_export_batch_size=BATCH,
                                             export_timeout_millis=int(TIMEOUT_S * 1000))

    def _taken(self, n: int) -> None:
        with self._lock:
            self._queued = max(0, self._queued - n)

    def _resource(self, tenant: str) -> Resource:
        found = self._resources.get(tenant)
        if found is None:
            found = self._resources[tenant] = Resource.create({"service.name": self.service, "flower.tenant": tenant})
        return found

    def send(self, span: Span) -> None:
        with self._lock:
            full = self._closed or self._queued >= MAX_QUEUED
            if not full:
                self._queued += 1
        if full:  # the newest waits no more than the rest would: dropped, counted
            self.dropped(span.tenant, 1)
            return
        trace = span.trace_id
        context = SpanContext(trace, span.span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        parent = None if span.parent_id is None else SpanContext(trace, span.parent_id, is_remote=True,
                                                                 trace_flags=TraceFlags(TraceFlags.SAMPLED))
        status = Status(StatusCode.ERROR, span.error) if span.error else Status(StatusCode.OK)
        start = int(span.start * 1e9)
        readable = ReadableSpan(span.name, context=context, parent=parent, resource=self._resource(span.tenant),
                                attributes=dict(span.attributes), kind=SpanKind.INTERNAL, status=status,
                                start_time=start, end_time=max(start, int(span.end * 1e9)),
                                instrumentation_scope=_SCOPE)
        self._processor.on_end(readable)

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            self._closed = True
        # its thread sends what is queued (each request bounded by TIMEOUT_S); a service stopping waits timeout_s
        ending = threading.Thread(target=self._processor.shutdown, name="flower-traces-close", daemon=True)
        ending.start()
        ending.join(timeout_s)

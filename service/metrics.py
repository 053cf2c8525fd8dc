"""Prometheus metrics of one service: what its runs, streams and guards did, per tenant.

Counters and histograms are fed where things happen (the scheduler starts, finishes and audits runs;
the gateway records model usage); the run and stream gauges are read from the registry and the
scheduler when scraped, so they are never out of step with the rows. One ``CollectorRegistry`` per
service: two apps in one process (tests, benchmarks) never mix their numbers.

Who may read which tenant did what is the operator's: ``render(per_tenant=False)`` is the same metrics summed over
tenants, no ``tenant`` label left — what a scrape without the scrape token gets (``service/api/ops.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["Metrics", "FailureReason", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4"  # the text format generate_latest writes; Litestar adds the charset
FailureReason = Literal["start", "failed", "aborted", "killed", "crashed", "vanished", "disk", "budget", "poisoned",
                        "tenant_removed"]
"""Why a run did not succeed: could not start; its step failed; it gave up; it was killed; it exited without
exit.json; its sandbox disappeared; it used more disk than allowed; more money; the service could not handle its
output; its tenant left the tenants file."""

_WAIT_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, float("inf"))
_START_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, float("inf"))
_DURATION_BUCKETS = (1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400, float("inf"))


class _Gauges(Collector):
    """Read at scrape time: runs by tenant and status, open SSE streams by tenant."""

    def __init__(self, runs: Callable[[], Mapping[tuple[str, str], int]],
                 streams: Callable[[], Mapping[str, int]]) -> None:
        self.runs, self.streams = runs, streams

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("flower_runs", "Runs in the registry by tenant and status (deleted ones included).",
                              labels=["tenant", "status"])
        for (tenant, status), n in sorted(self.runs().items()):
            g.add_metric([tenant, status], n)
        yield g
        s = GaugeMetricFamily("flower_sse_streams", "Open server-sent event streams by tenant.", labels=["tenant"])
        for tenant, n in sorted(self.streams().items()):
            s.add_metric([tenant], n)
        yield s


class _Egress(Collector):
    """Read at scrape time: the egress proxies' totals (``service.egress.proxy.read_counts``), which live in the
    gateway's process and survive its restarts."""

    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("flower_egress_requests", "Requests a run made through its tenant's egress "
                                       "allow-list, by decision (allowed, refused).", labels=["tenant", "decision"])
        sent = CounterMetricFamily("flower_egress_bytes", "Bytes through the egress allow-lists, by direction (up: "
                                   "from the run, down: to it).", labels=["tenant", "direction"])
        for name, n in sorted(self.read().items()):
            kind, _, rest = name.partition("|")
            tenant, _, label = rest.partition("|")
            if kind == "requests":
                requests.add_metric([tenant, label], n)
            elif kind == "bytes":
                sent.add_metric([tenant, label], n)
        yield requests
        yield sent


class _Summed(Collector):
    """Another registry's metrics with the ``tenant`` label summed out (a ``_created`` stamp: the earliest)."""

    def __init__(self, inner: CollectorRegistry) -> None:
        self.inner = inner

    def collect(self) -> Iterator[Metric]:
        for family in self.inner.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                key = (sample.name, tuple((k, v) for k, v in sample.labels.items() if k != "tenant"))
                before = values.get(key)
                if before is None:
                    values[key] = sample.value
                elif sample.name.endswith("_created"):
                    values[key] = min(before, sample.value)
                else:
                    values[key] = before + sample.value
            for (name, labels), value in values.items():
                out.add_sample(name, dict(labels), value)
            yield out


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.starts = Counter("flower_run_starts", "Runs whose sandbox was started.", ["tenant"], registry=r)
        self.failures = Counter("flower_run_failures", "Runs that did not succeed, by reason.",
                                ["tenant", "reason"], registry=r)
        self.warm = Counter("flower_warm_claims", "Run starts with a warm pool configured: a waiting sandbox "
                            "claimed (hit) or none left (miss, a cold start).", ["outcome"], registry=r)
        self.queue_wait = Histogram("flower_run_queue_wait_seconds", "From submit to the start of the sandbox.",
                                    ["tenant"], buckets=_WAIT_BUCKETS, registry=r)
        self.start = Histogram("flower_run_start_seconds", "From submit to the run's first model request, as the "
                               "gateway sees it; warm: the run claimed a waiting sandbox.", ["warm"],
                               buckets=_START_BUCKETS, registry=r)
        self.duration = Histogram("flower_run_duration_seconds", "From the start of the sandbox to the run's end.",
                                  ["tenant", "status"], buckets=_DURATION_BUCKETS, registry=r)
        self.denials = Counter("flower_guard_denials", "Tool calls a run's guards denied.", ["tenant"], registry=r)
        self.spills = Counter("flower_spills", "Large tool outputs spilled to files (spill_failed included).",
                              ["tenant", "outcome"], registry=r)
        self.tokens = Counter("flower_model_tokens", "Model tokens used, by tenant and kind (from the gateway).",
                              ["tenant", "kind"], registry=r)
        self.cost = Counter("flower_model_cost_usd", "Model cost in USD by tenant (from the gateway).", ["tenant"],
                            registry=r)
        self.resumes = Counter("flower_run_resumes", "Runs started again in a new sandbox on their own folder, by "
                               "cause: the sandbox was lost (crashed: exited without exit.json; vanished: gone; killed: "
                               "stopped by its engine or node), "
                               "or a parked run was woken (unparked).", ["tenant", "cause"], registry=r)
        self.parks = Counter("flower_run_parks", "Runs that gave their sandbox back while they waited for a person.",
                             ["tenant"], registry=r)
        self.spans_lost = Counter("flower_trace_spans_dropped", "Trace spans not delivered to the OTLP endpoint "
                                  "(its queue was full, or the endpoint did not take them); runs are unaffected.",
                                  ["tenant"], registry=r)

    def watch(self, runs: Callable[[], Mapping[tuple[str, str], int]],
              streams: Callable[[], Mapping[str, int]]) -> None:
        """Register the scrape-time gauges (the registry's run counts, the scheduler's open streams)."""
        self.registry.register(_Gauges(runs, streams))

    def watch_egress(self, read: Callable[[], Mapping[str, int]]) -> None:
        """Register the egress counters, read at scrape time (``requests|<tenant>|<decision>``,
        ``bytes|<tenant>|<direction>``)."""
        self.registry.register(_Egress(read))

    # -- what the scheduler reports --------------------------------------------------------------
    def started(self, tenant: str, waited_s: float) -> None:
        self.starts.labels(tenant).inc()
        self.queue_wait.labels(tenant).observe(max(0.0, waited_s))

    def first_request(self, warm: bool, after_s: float) -> None:
        self.start.labels("true" if warm else "false").observe(max(0.0, after_s))

    def finished(self, tenant: str, status: str, ran_s: float | None, reason: FailureReason | None) -> None:
        if ran_s is not None:
            self.duration.labels(tenant, status).observe(max(0.0, ran_s))
        if reason is not None:
            self.failures.labels(tenant, reason).inc()

    def resumed(self, tenant: str, cause: str) -> None:
        self.resumes.labels(tenant, cause).inc()

    def parked(self, tenant: str) -> None:
        self.parks.labels(tenant).inc()

    def failed_to_start(self, tenant: str) -> None:
        self.failures.labels(tenant, "start").inc()

    def audited(self, tenant: str, action: str) -> None:
        if action == "deny":
            self.denials.labels(tenant).inc()
        elif action in ("spill", "spill_failed"):
            self.spills.labels(tenant, "ok" if action == "spill" else "failed").inc()

    # -- what the model gateway reports ----------------------------------------------------------
    def model_usage(self, tenant: str, *, tokens: Mapping[str, int] | Iterable[tuple[str, int]] = (),
                    cost_usd: float = 0.0) -> None:
        """The gateway's hook: tokens by kind (``input``, ``output``, ``cache_read``, …) and cost of one model
        call, added to the tenant's totals."""
        for kind, n in (tokens.items() if isinstance(tokens, Mapping) else tokens):
            if n > 0:
                self.tokens.labels(tenant, kind).inc(n)
        if cost_usd > 0:
            self.cost.labels(tenant).inc(cost_usd)

    def spans_dropped(self, tenant: str, n: int) -> None:
        """Traces' hook (any thread): ``n`` of the tenant's spans were dropped."""
        self.spans_lost.labels(tenant).inc(n)

    def render(self, *, per_tenant: bool = True) -> bytes:
        """The text exposition; ``per_tenant=False``: summed over tenants, no tenant's name in it."""
        if per_tenant:
            return generate_latest(self.registry)
        summed = CollectorRegistry(auto_describe=False)
        summed.register(_Summed(self.registry))
        return generate_latest(summed)

"""The parts of traces (service/tracing/) that need no run: what the exporter sends to a real OTLP/HTTP receiver on
127.0.0.1 (the tenant as each span's resource attribute, the run's trace id), what it drops and counts (a receiver
that refuses, a queue past its bound while the receiver hangs), that traces off load no OpenTelemetry SDK, a bad
``otlp_endpoint`` refused with a sentence, and the span rules the two sides keep (times clamped, one attempt id
agreed without talking, a forged tool result closing nothing)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from service.config import load_config
from service.errors import ServiceConfigError
from service.gateway.grant import Grant
from service.gateway.wire import ToolResult, Usage
from service.metrics import Metrics
from service.registry import Run
from service.tracing import RunSpans, Span, WireSpans, span_id_of, trace_id_of, traces_url
from service.tracing.otlp import BATCH, MAX_QUEUED, OtlpExporter
from sandbox.records import Event

ROOT = Path(__file__).resolve().parents[2]


class Receiver:
    """An OTLP/HTTP receiver: decodes each POST to /v1/traces (protobuf) and answers ``status``; while ``hold`` is
    clear it answers nothing (a backend that hangs)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.status = 200
        self.hold = threading.Event()
        self.hold.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.hold.wait(60)
                request = ExportTraceServiceRequest.FromString(body)
                for rs in request.resource_spans:
                    resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            receiver.spans.append({"name": s.name, "trace_id": s.trace_id.hex(),
                                                   "span_id": int.from_bytes(s.span_id, "big"),
                                                   "parent": int.from_bytes(s.parent_span_id, "big") or None,
                                                   "resource": resource, "path": self.path})
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.hold.set()
    r.server.shutdown()


def _dropped(metrics: Metrics, tenant: str) -> float:
    value = metrics.registry.get_sample_value("flower_trace_spans_dropped_total", {"tenant": tenant})
    return value or 0.0


def _span(tenant: str, run: str, name: str, n: int = 1) -> Span:
    return Span(tenant, run, name, n, None, 1_000.0, 1_001.0, {"flower.run.id": run})


def test_spans_reach_the_receiver_with_their_tenant_as_resource_and_the_runs_trace_id(receiver: Receiver) -> None:
    metrics = Metrics()
    exporter = OtlpExporter(traces_url(receiver.url), metrics.spans_dropped)
    exporter.send(_span("acme", "run-a", "run", span_id_of("run", "run-a")))
    exporter.send(_span("beta", "run-b", "run", span_id_of("run", "run-b")))
    exporter.close()
    got = {s["name"] + s["resource"]["flower.tenant"]: s for s in receiver.spans}
    assert set(got) == {"runacme", "runbeta"}, receiver.spans
    assert got["runacme"]["trace_id"] == trace_id_of("run-a") and got["runbeta"]["trace_id"] == trace_id_of("run-b")
    assert got["runacme"]["span_id"] == span_id_of("run", "run-a")
    assert got["runacme"]["resource"]["service.name"] == "flower" and got["runacme"]["path"] == "/v1/traces"
    assert _dropped(metrics, "acme") == 0 == _dropped(metrics, "beta")


def test_a_receiver_that_refuses_loses_the_spans_and_each_is_counted_for_its_tenant(receiver: Receiver) -> None:
    receiver.status = 400  # not worth a retry: the batch is lost at once
    metrics = Metrics()
    exporter = OtlpExporter(traces_url(receiver.url), metrics.spans_dropped)
    for n in range(1, 4):
        exporter.send(_span("acme", "run-a", "step", n))
    exporter.send(_span("beta", "run-b", "step"))
    exporter.close()
    assert len(receiver.spans) == 4
    assert _dropped(metrics, "acme") == 3 and _dropped(metrics, "beta") == 1


def test_past_its_bound_a_span_is_dropped_at_once_while_the_receiver_hangs(receiver: Receiver) -> None:
    receiver.hold.clear()
    metrics = Metrics()
    exporter = OtlpExporter(traces_url(receiver.url), metrics.spans_dropped)
    extra = 10
    for n in range(1, MAX_QUEUED + BATCH + extra + 1):  # one batch may be in the receiver's hands already
        exporter.send(_span("acme", "run-a", "tool", n))
    assert _dropped(metrics, "acme") >= extra, "send returned while the receiver hangs: the rest was dropped"
    receiver.hold.set()
    exporter.close(timeout_s=30)
    assert len(receiver.spans) + _dropped(metrics, "acme") == MAX_QUEUED + BATCH + extra


def test_traces_off_load_no_opentelemetry_sdk_and_on_they_do(tmp_path: Path) -> None:
    (tmp_path / "tenants.toml").write_text("")
    probe = ("import sys, service.app, service.gateway.daemon\n"
             "from service.config import load_config\nfrom service.metrics import Metrics\n"
             "from service.tracing import exporter_of\n"
             f"config = load_config(None, env={{}}, data_dir={str(tmp_path)!r}, "
             f"tenants={str(tmp_path / 'tenants.toml')!r}, otlp_endpoint=sys.argv[1])\n"
             "exporter = exporter_of(config, Metrics())\n"
             "print(exporter is None, sorted({m for m in sys.modules if m.startswith(('opentelemetry.sdk', "
             "'opentelemetry.exporter'))})[:1])\n")

    def loaded(endpoint: str) -> str:
        done = subprocess.run([sys.executable, "-c", probe, endpoint], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert loaded("") == "True []"
    assert loaded("http://127.0.0.1:9") == "False ['opentelemetry.exporter']"


@pytest.mark.parametrize("endpoint", ["127.0.0.1:4318", "http://", "ftp://collector:4318", "http://host:port"])
def test_an_otlp_endpoint_that_is_not_an_http_url_is_refused_with_a_sentence(tmp_path: Path, endpoint: str) -> None:
    (tmp_path / "tenants.toml").write_text("")
    with pytest.raises(ServiceConfigError, match="`otlp_endpoint` in .* is not an http:// or https:// URL such as"):
        load_config(None, env={}, data_dir=str(tmp_path), tenants=str(tmp_path / "tenants.toml"),
                    otlp_endpoint=endpoint)


@pytest.mark.parametrize("link, endpoint, says", [
    ("http://ui/traces/{trace_id}", "", "links traces, but no trace is sent: set `otlp_endpoint` too"),
    ("http://ui/traces/", "http://127.0.0.1:4318", "must be an http:// or https:// URL holding {trace_id}"),
    ("javascript:alert({trace_id})", "http://127.0.0.1:4318", "must be an http:// or https:// URL holding"),
])
def test_a_trace_link_that_cannot_link_a_trace_is_refused_with_a_sentence(tmp_path: Path, link: str, endpoint: str,
                                                                          says: str) -> None:
    (tmp_path / "tenants.toml").write_text("")
    with pytest.raises(ServiceConfigError, match=re.escape(says)):
        load_config(None, env={}, data_dir=str(tmp_path), tenants=str(tmp_path / "tenants.toml"),
                    otlp_endpoint=endpoint, trace_link=link)


def test_the_traces_url_adds_otlps_path_only_when_the_endpoint_names_none() -> None:
    assert traces_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/traces"
    assert traces_url("http://127.0.0.1:4318/") == "http://127.0.0.1:4318/v1/traces"
    assert traces_url("https://otel.example/ingest/traces") == "https://otel.example/ingest/traces"


class Kept:
    """The ``Exporter`` seam's double: the spans, in the order sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def send(self, span: Span) -> None:
        self.spans.append(span)

    def close(self, timeout_s: float = 5.0) -> None:
        pass


def _run(**kw: Any) -> Run:
    return Run(**{"id": "run-x", "tenant": "acme", "ask": "a", "options": {}, "status": "running", "created": 100.0,
                  "started": 110.0, **kw})


def test_a_runs_steps_keep_their_order_and_its_event_times_are_clamped_to_when_they_were_read() -> None:
    kept = Kept()
    spans = RunSpans(kept, now=lambda: 200.0)
    run = _run()
    spans.saw(run, Event(kind="step", text="确认需求", step="确认需求", at=50.0))  # before the run started
    spans.saw(run, Event(kind="system", text="init", step="确认需求", payload={"session_id": "s-1"}, at=120.0))
    spans.saw(run, Event(kind="step", text="工作", step="工作", at=9e9))  # in the future
    spans.saw(run, Event(kind="system", text="init", step="工作", payload={"session_id": "s-2"}, at=150.0))
    spans.saw(run, Event(kind="retry", step="工作", at=160.0))
    ended = _run(status="succeeded", ended=210.0, input_tokens=7, cost_usd=0.5)
    spans.ended(ended)
    by_name = {s.name: s for s in kept.spans}
    assert [s.name for s in kept.spans] == ["attempt 1", "step 确认需求", "attempt 1", "step 工作", "run"]
    first, second = kept.spans[1], kept.spans[3]
    assert first.start == 110.0 and first.end == 200.0, "clamped: not before its start, not after it was read"
    assert second.start == 200.0 and second.attributes["flower.step.retries"] == 1
    assert kept.spans[0].span_id == span_id_of("attempt", "run-x", "s-1") and kept.spans[0].parent_id == first.span_id
    assert first.parent_id == second.parent_id == span_id_of("run", "run-x") == by_name["run"].span_id
    assert by_name["run"].parent_id is None and by_name["run"].error is None
    assert by_name["run"].attributes["gen_ai.usage.input_tokens"] == 7 and by_name["run"].attributes[
        "flower.cost_usd"] == 0.5


def test_the_wire_spans_only_calls_it_saw_and_puts_a_subagent_under_the_agent_call_that_started_it() -> None:
    kept = Kept()
    wire = WireSpans(kept, now=lambda: 300.0)
    grant = Grant("run-x", "acme", "hash", "http://upstream", [])
    usage = Usage(input_tokens=10, output_tokens=2, cache_read_input_tokens=3, cache_creation_input_tokens=1,
                  cost_usd=0.25)
    wire.model_call(grant, session="s-1", agent="main", model="claude-x", request_model="claude-x", usage=usage,
                    status=200, start=200.0, end=201.0, calls=[("tu-1", "Agent"), ("tu-2", "Bash")])
    wire.model_call(grant, session="s-1", agent="agent-7", model="claude-x", request_model="claude-x",
                    usage=usage, status=200, start=202.0, end=203.0, calls=[])
    wire.results(grant, [ToolResult("tu-forged", "deny", "no"), ToolResult("tu-2", "deny", "refused")])
    wire.closed(grant)
    chat, sub_chat = kept.spans[0], kept.spans[1]
    assert chat.parent_id == span_id_of("attempt", "run-x", "s-1")
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 3 and chat.attributes["flower.cost_usd"] == 0.25
    bash = next(s for s in kept.spans if s.name == "execute_tool Bash")
    agent_call = next(s for s in kept.spans if s.name == "execute_tool Agent")
    subagent = next(s for s in kept.spans if s.name == "subagent")
    assert bash.attributes["flower.tool.denied"] is True and bash.parent_id == chat.span_id and bash.end == 300.0
    assert agent_call.attributes["flower.tool.unfinished"] is True, "no result came back before the grant closed"
    assert subagent.parent_id == agent_call.span_id and sub_chat.parent_id == subagent.span_id
    assert not [s for s in kept.spans if "tu-forged" in str(s.attributes)], "a forged result closes nothing"
    assert len(kept.spans) == 5

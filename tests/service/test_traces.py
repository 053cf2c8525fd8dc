"""Issue 36, traces: a run through the service (``python -m service``, the real bundled CLI, the scripted model)
lands in a real tracing backend on 127.0.0.1 — Arize Phoenix from PyPI (tests/_phoenix.py), read back through its
REST API — as one trace: the run, its steps and attempts, a span per model call whose tokens and cost add up to the
gateway's metering of the run (its API row), a span per tool call (a guard's denial says so), a subagent's span;
the run's row and its page name the trace. An endpoint that is down loses spans, counted, and no run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from _hello import hello_rules
from _phoenix import Phoenix, phoenix  # noqa: F401 - the session's Phoenix (tests/_phoenix.py)
from _registries import free_port
from _service_helpers import TOKENS, Deployment, Service, serve, wait_for, wait_question, wait_status
from test_web_page import browser, sign_in, until  # noqa: F401 - the headless Chromium fixture
from flower.testing import Rule, ScriptedModel, say, tool
from flower.testing.script import Reply
from sandbox.testing import BRIEF, CLARIFIER

pytestmark = pytest.mark.cli

ENDED = ("succeeded", "failed", "cancelled", "aborted", "killed")
ASK = "帮我做一个 hello 程序,要留痕"
USAGE = {"input_tokens": 1_200, "output_tokens": 90, "cache_read_input_tokens": 300,
         "cache_creation_input_tokens": 40}
KINDS = {"input_tokens": "gen_ai.usage.input_tokens", "output_tokens": "gen_ai.usage.output_tokens",
         "cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
         "cache_write_tokens": "gen_ai.usage.cache_creation.input_tokens"}


def traced_rules() -> list[Rule]:
    """The hello run (a question, a goal, a dispatched coder, a verdict) with usage on every answer, and a clarifier
    that first tries to Write (its guard denies it)."""
    rules = [Rule(tool("Write", {"file_path": "notes.txt", "content": "x"}), system=CLARIFIER, prompt=ASK),
             *hello_rules(ASK)]
    for rule in rules:
        for answer in rule.answers:
            if isinstance(answer, Reply):
                answer.usage = dict(USAGE)
    return rules


def _config(endpoint: str) -> str:
    return f'otlp_endpoint = "{endpoint}"\n'


def _of(span: dict[str, Any], name: str) -> Any:
    return span["attributes"].get(name)


@pytest.mark.parametrize("gateway_process", ["beside", "inside"])
def test_a_run_is_one_trace_in_phoenix_whose_model_calls_add_up_to_the_gateways_metering(
        tmp_path: Path, services: list[Service], phoenix: Phoenix, gateway_process: str) -> None:
    """The gateway in a process of its own (the default) or in the API's: the same trace either way."""
    dep = Deployment(tmp_path, extra_config=_config(phoenix.url) + f'gateway_process = "{gateway_process}"\n')
    with ScriptedModel(traced_rules()) as model:
        service = serve(dep, services, model)
        acme = service.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": ASK, "options": {"rounds": 1}}).json()["id"]
        q = wait_question(acme, run_id)
        assert acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "1"}).status_code == 200
        row = wait_status(acme, run_id, ENDED)
        calls = [r for r in model.requests if r.path.split("?")[0] == "/v1/messages"]
    assert row["status"] == "succeeded", row
    trace_id = row["trace_id"]
    assert trace_id and len(trace_id) == 32, row
    assert row["cost_usd"] > 0 and all(row["usage"][k] > 0 for k in KINDS), row

    def whole() -> list[dict[str, Any]] | None:  # the run's span comes last, a subagent's when its grant closes
        spans = phoenix.trace(trace_id)
        names = Counter(s["name"] for s in spans)
        chats = [s for s in spans if _of(s, "gen_ai.operation.name") == "chat"]
        done = names["run"] == 1 and names["subagent"] >= 1 and len(chats) == len(calls)
        return spans if done else None

    spans = wait_for(whole, 90, 0.5, "the run's whole trace in Phoenix")
    by_id = {s["context"]["span_id"]: s for s in spans}
    run_span = next(s for s in spans if s["name"] == "run")
    steps = [s for s in spans if s["name"].startswith("step ")]
    attempts = [s for s in spans if s["name"].startswith("attempt ")]
    chats = [s for s in spans if _of(s, "gen_ai.operation.name") == "chat"]
    tools = [s for s in spans if _of(s, "gen_ai.operation.name") == "execute_tool"]
    agents = [s for s in spans if s["name"] == "subagent"]

    # one trace per run: every span of the run is in it, and nothing else is
    of_run = [s for s in phoenix.spans() if _of(s, "flower.run.id") == run_id]
    assert {s["context"]["trace_id"] for s in of_run} == {trace_id}
    assert {s["context"]["span_id"] for s in of_run} == set(by_id)

    # run → step → attempt → model call → tool call; a subagent's calls under it: no span without its parent
    assert run_span["parent_id"] is None
    assert all(s["parent_id"] in by_id for s in spans if s is not run_span), \
        [(s["name"], s["parent_id"]) for s in spans if s is not run_span and s["parent_id"] not in by_id]
    assert len(steps) >= 3 and all(by_id[s["parent_id"]] is run_span for s in steps), [s["name"] for s in steps]
    assert attempts and all(by_id[a["parent_id"]] in steps for a in attempts)
    assert all(by_id[c["parent_id"]] in attempts + agents for c in chats if _of(c, "flower.agent") == "main")
    assert [c for c in chats if _of(c, "flower.agent") != "main"], "the coder's calls, under its subagent's span"
    assert all(by_id[c["parent_id"]] in agents for c in chats if _of(c, "flower.agent") != "main")
    assert all(by_id[t["parent_id"]] in chats for t in tools)
    assert any(by_id[a["parent_id"]]["attributes"].get("gen_ai.tool.name") == "Agent" for a in agents)

    # a span per model call, and their tokens and cost are the gateway's metering of the run
    assert len(chats) == len(calls)
    for kind, attribute in KINDS.items():
        assert sum(_of(c, attribute) for c in chats) == row["usage"][kind] == _of(run_span, attribute), kind
    assert sum(_of(c, "flower.cost_usd") for c in chats) == pytest.approx(row["cost_usd"], abs=1e-6)
    assert _of(run_span, "flower.cost_usd") == pytest.approx(row["cost_usd"], abs=1e-6)
    assert all(_of(c, "gen_ai.request.model") and _of(c, "gen_ai.response.model") for c in chats)

    # a span per tool call the wire saw: the clarifier's Write denied, the coder's Write not
    named = Counter(_of(t, "gen_ai.tool.name") for t in tools)
    assert named["Write"] == 2 and named["Agent"] == 1, named
    writes = sorted((t for t in tools if _of(t, "gen_ai.tool.name") == "Write"), key=lambda t: t["start_time"])
    assert [_of(t, "flower.tool.denied") for t in writes] == [True, False]
    assert not any(_of(t, "flower.tool.spilled") for t in tools)
    assert all(_of(t, "flower.tool.duration_s") >= 0 for t in tools)


def _where_and_links(driver: Any) -> tuple[str, list[str]] | None:
    """The run's "where" line and its links, read in one go once it names a trace: the page redraws the line as the
    run's events come, and a link found a moment before may be gone when its address is read."""
    where, hrefs = driver.execute_script("const e = document.getElementById('run-where'); "
                                         "return [e.innerText, [...e.querySelectorAll('a')].map(a => a.href)]")
    return (where, hrefs) if "trace" in where else None


def test_the_page_shows_the_runs_trace_id_and_a_service_without_traces_names_none(
        tmp_path: Path, services: list[Service], phoenix: Phoenix, browser: Any) -> None:
    driver = browser
    rules = [Rule(say(BRIEF), system=CLARIFIER, repeat=True)]
    with ScriptedModel(rules) as model:
        link = phoenix.url + "/projects/UHJvamVjdDox/traces/{trace_id}"  # Phoenix's page of a trace
        traced = serve(Deployment(tmp_path / "on", extra_config=_config(phoenix.url) + f'trace_link = "{link}"\n'),
                       services, model)
        acme = traced.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "只澄清", "options": {"clarify_only": True}}).json()["id"]
        row = wait_status(acme, run_id, ENDED)
        listed = acme.get("/v1/runs").json()["runs"]
        driver.get(f"{traced.url}/#{run_id}")
        sign_in(driver, traced, TOKENS["acme"])
        where, hrefs = until(driver, _where_and_links, "the run's trace id on the page")
        plain = serve(Deployment(tmp_path / "off"), services, model, name="plain")
        plain_acme = plain.client("acme")
        other = plain_acme.post("/v1/runs", json={"ask": "只澄清", "options": {"clarify_only": True}}).json()["id"]
        untraced = wait_status(plain_acme, other, ENDED)
    assert row["status"] == "succeeded" and row["trace_id"], row
    assert row["trace_id"] in where, where
    assert row["trace_url"] == link.replace("{trace_id}", row["trace_id"]) and hrefs == [row["trace_url"]], hrefs
    assert [r["trace_id"] for r in listed if r["id"] == run_id] == [row["trace_id"]]
    assert untraced["status"] == "succeeded" and untraced["trace_id"] is None and untraced["trace_url"] is None


def test_an_endpoint_that_is_down_drops_spans_counts_them_and_the_run_succeeds(
        tmp_path: Path, services: list[Service]) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with ScriptedModel([Rule(say(BRIEF, usage=USAGE), system=CLARIFIER, repeat=True)]) as model:
        service = serve(Deployment(tmp_path, extra_config=_config(down)), services, model)
        acme = service.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "只澄清", "options": {"clarify_only": True}}).json()["id"]
        row = wait_status(acme, run_id, ENDED)

        def dropped() -> float:
            text = httpx.get(f"{service.url}/metrics").text
            return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                       if s.name == "flower_trace_spans_dropped_total")

        lost = wait_for(dropped, 60, 0.5, "spans counted as dropped")
    assert row["status"] == "succeeded" and row["error"] is None, row
    assert row["trace_id"], row
    assert lost >= 2, "the run's step and its own span at least"
    warned = [line for line in service.lines() if line.get("event") == "traces.export_failed"]
    assert warned and "dropped and counted" in warned[0]["error"], warned

"""The OpenAPI document tells the truth: schemathesis generates requests from /schema/openapi.json against a
live service on 127.0.0.1 and checks every response — no 5xx, every status, content type, header and body as
documented. Generated requests name runs nobody has; the real runs (one waiting on a question, one ended)
are then fed through the same checks, so the 200 shapes are checked on real data too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from _service_helpers import TOKENS, Deployment, Service, end_leftover_runs, wait_question, wait_status
from flower.testing import Rule, ScriptedModel, tool
from sandbox.testing import ASK, CLARIFIER

pytestmark = pytest.mark.cli

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
AUTH = {"Authorization": f"Bearer {TOKENS['acme']}"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, str]]]:
    """One service (one run at a time), a run that waits on its question throughout, and an ended run."""
    rules = [Rule(tool(ASK, {"question": "等着"}), system=CLARIFIER, repeat=True)]
    with ScriptedModel(rules) as model:
        dep = Deployment(tmp_path_factory.mktemp("schema"), env=model.env, max_running=1)
        service = Service(dep).start()
        try:
            acme = service.client("acme")
            waiting = acme.post("/v1/runs", json={"ask": "等着的活", "options": {"clarify_only": True}}).json()["id"]
            question = wait_question(acme, waiting)
            ended = acme.post("/v1/runs", json={"ask": "排队时取消"}).json()["id"]
            assert acme.post(f"/v1/runs/{ended}/cancel").json()["status"] == "cancelled"
            yield service, {"waiting": waiting, "ended": ended, "question": question["id"]}
        finally:
            service.stop()
            end_leftover_runs(dep.data / "runs")


@pytest.fixture(scope="module")
def api_schema(live: tuple[Service, dict[str, str]]) -> Any:
    return schemathesis.openapi.from_url(f"{live[0].url}/schema/openapi.json")


def _operations(api_schema: Any) -> list[Any]:
    return [result.ok() for result in api_schema.get_all_operations()]


def test_the_document_covers_every_route(api_schema: Any) -> None:
    routes = {(op.method.upper(), op.path) for op in _operations(api_schema)}
    assert routes == {("POST", "/v1/runs"), ("GET", "/v1/runs"), ("GET", "/v1/runs/{run_id}"),
                      ("DELETE", "/v1/runs/{run_id}"), ("POST", "/v1/runs/{run_id}/cancel"),
                      ("GET", "/v1/runs/{run_id}/diff"), ("GET", "/v1/runs/{run_id}/diff/files"),
                      ("GET", "/v1/runs/{run_id}/manifest"),
                      ("GET", "/v1/runs/{run_id}/events"), ("GET", "/v1/runs/{run_id}/questions"),
                      ("POST", "/v1/runs/{run_id}/answers"), ("POST", "/v1/runs/{run_id}/messages"),
                      ("POST", "/v1/runs/{run_id}/interrupt"), ("GET", "/healthz"), ("GET", "/metrics"),
                      ("GET", "/v1/usage"), ("GET", "/v1/webhooks/deliveries"), ("POST", "/v1/runs/{run_id}/push")}, routes


@pytest.mark.parametrize("bound", [15])
def test_generated_requests_get_documented_answers(api_schema: Any, live: tuple[Service, dict[str, str]],
                                                   bound: int) -> None:
    """A bounded number of generated cases per operation (fewer submissions: a valid one queues a real run,
    behind the waiting one, so none of them starts)."""
    from hypothesis import given

    for op in _operations(api_schema):
        examples = 8 if (op.method.upper(), op.path) == ("POST", "/v1/runs") else bound

        @given(case=op.as_strategy())
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=30)

        check()


def test_real_runs_answer_as_documented(api_schema: Any, live: tuple[Service, dict[str, str]]) -> None:
    service, ids = live
    waiting, ended = ids["waiting"], ids["ended"]
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/v1/runs", {}),
        ("GET", "/v1/runs", {"query": {"status": "running,cancelled", "limit": 5, "deleted": False}}),
        ("GET", "/v1/runs/{run_id}", {"path_parameters": {"run_id": waiting}}),
        ("GET", "/v1/runs/{run_id}/questions", {"path_parameters": {"run_id": waiting}}),
        ("GET", "/v1/runs/{run_id}/manifest", {"path_parameters": {"run_id": waiting}}),
        ("GET", "/v1/runs/{run_id}/diff", {"path_parameters": {"run_id": waiting}}),
        ("POST", "/v1/runs/{run_id}/messages", {"path_parameters": {"run_id": waiting}, "body": {"text": "你好"}}),
        ("POST", "/v1/runs/{run_id}/answers", {"path_parameters": {"run_id": waiting},
                                               "body": {"question_id": "not-open", "text": "1"}}),
        ("POST", "/v1/runs/{run_id}/messages", {"path_parameters": {"run_id": ended}, "body": {"text": "晚了"}}),
        ("GET", "/v1/runs/{run_id}/diff", {"path_parameters": {"run_id": ended}}),
        ("GET", "/v1/runs/{run_id}/events", {"path_parameters": {"run_id": ended}}),
        ("POST", "/v1/runs/{run_id}/cancel", {"path_parameters": {"run_id": ended}}),
        ("DELETE", "/v1/runs/{run_id}", {"path_parameters": {"run_id": waiting}}),
        ("DELETE", "/v1/runs/{run_id}", {"path_parameters": {"run_id": ended}, "query": {"branch": True}}),
        ("GET", "/v1/runs/{run_id}/events", {"path_parameters": {"run_id": ended}}),
        ("GET", "/v1/runs/{run_id}/manifest", {"path_parameters": {"run_id": ended}}),
        ("GET", "/v1/runs/{run_id}", {"path_parameters": {"run_id": ended}}),
        ("GET", "/healthz", {}),
        ("GET", "/metrics", {}),
    ]
    seen = []
    for method, path, parts in calls:
        case = api_schema[path][method].Case(**parts)
        response = case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=30)
        seen.append((method, path, response.status_code))
    codes = [code for _, _, code in seen]
    assert codes == [200, 200, 200, 200, 200, 200, 202, 404, 409, 409, 200, 409, 409, 200, 410, 410, 200, 200, 200], seen
    assert httpx.get(f"{service.url}/v1/runs/{ended}", headers=AUTH).json()["deleted"]
    acme = service.client("acme")
    assert wait_status(acme, waiting, ("running",))["status"] == "running", "the live run was never touched"


def test_the_docs_page_loads_nothing_from_outside(live: tuple[Service, dict[str, str]]) -> None:
    import re

    service, _ = live
    page = httpx.get(f"{service.url}/schema")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "SwaggerUIBundle" in page.text and not re.search(r"(src|href)=[\"']?https?://", page.text), page.text[:800]
    assets = re.findall(r"(?:src|href)=[\"']([^\"']+)[\"']", page.text)
    assert {"/schema/assets/swagger-ui-bundle.js", "/schema/assets/swagger-ui.css"} <= set(assets), assets
    for asset in assets:
        r = httpx.get(f"{service.url}{asset}")
        assert r.status_code == 200 and len(r.content) > 100, asset
    docs = httpx.get(f"{service.url}/docs")
    assert docs.status_code in (301, 302, 307, 308) and docs.headers["location"] == "/schema"
    web = httpx.get(f"{service.url}/")  # the web page, beside the API and its docs
    assert web.status_code == 200 and "<html" in web.text.lower() and "SwaggerUIBundle" not in web.text

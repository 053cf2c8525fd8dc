"""The OpenAPI document tells the truth: schemathesis generates requests from /schema/openapi.json against a
live service on 127.0.0.1 and checks every response — no 5xx, every status, content type, header and body as
documented. Generated requests name runs nobody has; the real runs (one waiting on a question, one ended)
are then fed through the same checks, so the 200 shapes are checked on real data too. Every operation has a verb
for its id, a description and examples, each checked against its own schema, and the request examples are sent.
The docs page is read in a real headless Chromium, by the operations it shows."""

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
from test_web_page import ARTIFACTS, browser  # noqa: F401 - the headless Chromium fixture
from flower.testing import Rule, ScriptedModel, tool
from sandbox.testing import ASK, CLARIFIER

pytestmark = pytest.mark.cli

OPERATION_IDS = {("POST", "/v1/runs"): "create_run", ("GET", "/v1/runs"): "list_runs",
                 ("GET", "/v1/runs/{run_id}"): "get_run", ("DELETE", "/v1/runs/{run_id}"): "delete_run",
                 ("POST", "/v1/runs/{run_id}/cancel"): "cancel_run", ("GET", "/v1/runs/{run_id}/diff"): "get_run_diff",
                 ("GET", "/v1/runs/{run_id}/diff/files"): "list_run_files",
                 ("GET", "/v1/runs/{run_id}/manifest"): "get_run_manifest",
                 ("GET", "/v1/runs/{run_id}/events"): "stream_run_events",
                 ("GET", "/v1/runs/{run_id}/questions"): "list_questions",
                 ("POST", "/v1/runs/{run_id}/answers"): "answer_question",
                 ("POST", "/v1/runs/{run_id}/messages"): "send_message",
                 ("POST", "/v1/runs/{run_id}/interrupt"): "interrupt_run", ("GET", "/healthz"): "get_health",
                 ("GET", "/metrics"): "get_metrics", ("GET", "/v1/usage"): "get_usage",
                 ("GET", "/v1/webhooks/deliveries"): "list_webhook_deliveries",
                 ("POST", "/v1/runs/{run_id}/push"): "push_run_branch",
                 ("POST", "/v1/schedules"): "create_schedule", ("GET", "/v1/schedules"): "list_schedules",
                 ("GET", "/v1/schedules/{schedule_id}"): "get_schedule",
                 ("DELETE", "/v1/schedules/{schedule_id}"): "delete_schedule",
                 ("POST", "/v1/schedules/{schedule_id}/pause"): "pause_schedule",
                 ("POST", "/v1/schedules/{schedule_id}/resume"): "resume_schedule",
                 ("POST", "/v1/schedules/{schedule_id}/trigger"): "issue_trigger",
                 ("DELETE", "/v1/schedules/{schedule_id}/trigger"): "revoke_trigger",
                 ("POST", "/v1/triggers/{schedule_id}"): "fire_trigger"}
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


@pytest.fixture(scope="module")
def document(live: tuple[Service, dict[str, str]]) -> dict[str, Any]:
    return dict(httpx.get(f"{live[0].url}/schema/openapi.json").json())


def _each_operation(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, op in item.items():
            yield method.upper(), path, op


def test_the_document_covers_every_route(api_schema: Any) -> None:
    routes = {(op.method.upper(), op.path) for op in _operations(api_schema)}
    assert routes == set(OPERATION_IDS), routes


def _examples(media: dict[str, Any]) -> list[Any]:
    """A body's examples, wherever OpenAPI lets them be: on the media type or on its schema."""
    return [e["value"] for e in media.get("examples", {}).values()] + list(media.get("schema", {}).get("examples", []))


def test_every_operation_has_a_verb_for_its_id_a_description_and_examples_that_fit_its_schema(
        document: dict[str, Any]) -> None:
    import jsonschema

    tags = {t["name"] for t in document["tags"]}
    ids, checked = {}, 0
    for method, path, op in _each_operation(document):
        ids[(method, path)] = op["operationId"]
        where = f"{method} {path}"
        assert op.get("summary") and len(op.get("description", "")) > 20, (where, "says what it does")
        assert op.get("tags") and set(op["tags"]) <= tags, (where, op.get("tags"))
        bodies = [("request", op["requestBody"]["content"])] if "requestBody" in op else []
        bodies += [(status, r["content"]) for status, r in op["responses"].items() if r.get("content")]
        for what, content in bodies:
            for media_type, media in content.items():
                examples = _examples(media)
                assert examples, (where, what, media_type, "has no example")
                schema = {**media["schema"], "components": document["components"]}
                for value in examples:
                    jsonschema.Draft202012Validator(schema).validate(value)
                    checked += 1
    assert ids == OPERATION_IDS, ids
    assert checked >= 80, checked  # every success and error answer of the 18 operations, and 4 request bodies


def test_every_request_example_is_accepted_by_the_service(document: dict[str, Any], api_schema: Any,
                                                         live: tuple[Service, dict[str, str]]) -> None:
    """Sent as documented: the submission is queued (behind the waiting run); the mailbox ones go to the ended
    run, where passing the body's validation is what makes the answer a 409 rather than a 400."""
    ended = live[1]["ended"]
    seen = {}
    for method, path, op in _each_operation(document):
        if "requestBody" not in op:
            continue
        for value in _examples(op["requestBody"]["content"]["application/json"]):
            parts = {"path_parameters": {"run_id": ended}} if "{run_id}" in path else \
                {"path_parameters": {"schedule_id": "sch-" + "0" * 24}} if "{schedule_id}" in path else {}
            case = api_schema[path][method].Case(body=value, **parts)
            seen[op["operationId"]] = case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=30).status_code
    assert seen == {"create_run": 201, "answer_question": 409, "send_message": 409, "interrupt_run": 409,
                    "create_schedule": 201, "fire_trigger": 401}, seen


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
        ("GET", "/metrics", {}),  # with a tenant's token, not the scrape token: a documented 401
    ]
    seen = []
    for method, path, parts in calls:
        case = api_schema[path][method].Case(**parts)
        response = case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=30)
        seen.append((method, path, response.status_code))
    codes = [code for _, _, code in seen]
    assert codes == [200, 200, 200, 200, 200, 200, 202, 404, 409, 409, 200, 409, 409, 200, 410, 410, 200, 200, 401], seen
    assert httpx.get(f"{service.url}/v1/runs/{ended}", headers=AUTH).json()["deleted"]
    acme = service.client("acme")
    assert wait_status(acme, waiting, ("running",))["status"] == "running", "the live run was never touched"


def test_the_docs_page_loads_nothing_from_outside(live: tuple[Service, dict[str, str]]) -> None:
    import re

    service, _ = live
    page = httpx.get(f"{service.url}/schema")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", page.text), page.text[:800]
    assets = re.findall(r"(?:src|href)=[\"']([^\"']+)[\"']", page.text)
    assert {"/schema/assets/swagger-ui/swagger-ui-bundle.js", "/schema/assets/swagger-ui/swagger-ui.css",
            "/schema/assets/start.js"} <= set(assets), assets
    for asset in assets:
        r = httpx.get(f"{service.url}{asset}")
        assert r.status_code == 200 and len(r.content) > 100, asset
    docs = httpx.get(f"{service.url}/docs")
    assert docs.status_code in (301, 302, 307, 308) and docs.headers["location"] == "/schema"
    web = httpx.get(f"{service.url}/")  # the web page, beside the API and its docs
    assert web.status_code == 200 and "<html" in web.text.lower() and "swagger-ui" not in web.text


# Every violation of the page's Content-Security-Policy, recorded from before the page's first script runs.
_WATCH = ("window.violations = []; document.addEventListener('securitypolicyviolation', "
          "(e) => window.violations.push(`${e.violatedDirective} ${e.blockedURI}`))")
_SHOWN = ("return [...document.querySelectorAll('.opblock')].map((o) => ["
          "o.querySelector('.opblock-summary-method').textContent,"
          "o.querySelector('.opblock-summary-path').getAttribute('data-path'),"
          "o.querySelector('.opblock-summary-operation-id').textContent,"
          "o.querySelector('.opblock-summary-description').textContent])")


def test_the_docs_page_renders_every_operation_in_a_browser_from_its_own_files(
        live: tuple[Service, dict[str, str]], document: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    service, _ = live
    driver = browser
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _WATCH})
    driver.get(f"{service.url}/schema")
    wanted = {(method, path, op["operationId"], op["summary"]) for method, path, op in _each_operation(document)}
    WebDriverWait(driver, 60, poll_frequency=0.2).until(
        lambda d: len(d.find_elements("css selector", ".opblock")) >= len(wanted) or "Unable to" in d.page_source,
        message="timed out waiting for the docs page to show the operations")
    driver.save_screenshot(str(ARTIFACTS / "docs-page.png"))
    assert "Unable to render" not in driver.page_source
    assert {tuple(row) for row in driver.execute_script(_SHOWN)} == wanted
    assert "OAS 3.1" in driver.find_element("css selector", ".info").text
    assert driver.execute_script("return window.violations") == [], "the page keeps its policy"
    loaded = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
    assert loaded and all(url.startswith(service.url + "/") for url in loaded), loaded
    policy = httpx.get(f"{service.url}/schema").headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe" not in policy, policy

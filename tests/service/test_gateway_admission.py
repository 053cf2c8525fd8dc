"""The gateway's admission (``service.gateway.admission``) without a socket: each row one request shape — its
grant, its head, its decoded body, the meter's answer, its headers — and the decision the gateway must make. The
same decisions are exercised through the real gateway, over a socket, in tests/security/test_gateway*.py; here
each rule and the order the rules are asked in is pinned down one row at a time."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import pytest

from service.gateway import Grant, Held, Refused
from service.gateway.admission import (
    MAX_BODY,
    MAX_IN_FLIGHT,
    MAX_RUN_BODY_BYTES,
    THROUGH,
    Audit,
    Bound,
    Decision,
    EgressRefused,
    Head,
    Refuse,
    on_ask,
    on_budget,
    on_head,
    passed_headers,
    undecodable,
)
from service.gateway.wire import Ask, contents

OVER = "run run-1 has spent its budget_usd.run of $1.00: raise it in the tenants file"


def grant(*, refused: str | None = None, in_flight: int = 0, tools: frozenset[str] = frozenset()) -> Grant:
    g = Grant("run-1", "acme", "0" * 64, "http://127.0.0.1:9", [("x-api-key", "sk-tenant")], refused=refused,
              server_tools=tools)
    g.in_flight = in_flight
    return g


def refuse(status: int, error: str, why: str, audit: Audit, bound: Bound | None = None) -> Refuse:
    return Refuse(status, error, why, audit, bound)


NO_TOKEN = refuse(401, "authentication_error", "this token belongs to no live run on this socket", Audit.UNAUTHORISED)
NOT_FORWARDED = refuse(404, "not_found_error", "only POST /v1/messages and /v1/messages/count_tokens are forwarded",
                       Audit.NONE)
SPENT = refuse(403, "permission_error", OVER, Audit.DENIED)
IN_FLIGHT = refuse(429, "rate_limit_error", f"more than {MAX_IN_FLIGHT} model calls of this run at once",
                   Audit.BOUND, "in_flight")
TOO_BIG = refuse(413, "request_too_large", "request body over 64 MB", Audit.DENIED)
BODIES = refuse(429, "rate_limit_error", f"this run's model calls at once carry over {MAX_RUN_BODY_BYTES >> 20} MB",
                Audit.BOUND, "run_body_bytes")

HEADS: list[tuple[str, Head, Decision]] = [
    ("no live token", Head(None, "POST", "/v1/messages", 100, 0), NO_TOKEN),
    ("no live token, whatever else is wrong", Head(None, "GET", "/v1/models", MAX_BODY + 1, MAX_RUN_BODY_BYTES),
     NO_TOKEN),
    ("messages", Head(grant(), "POST", "/v1/messages", 100, 0), THROUGH),
    ("count_tokens", Head(grant(), "POST", "/v1/messages/count_tokens", 100, 0), THROUGH),
    ("GET on messages", Head(grant(), "GET", "/v1/messages", 0, 0), NOT_FORWARDED),
    ("another path of the API", Head(grant(), "POST", "/v1/files", 100, 0), NOT_FORWARDED),
    ("a batch", Head(grant(), "POST", "/v1/messages/batches", 100, 0), NOT_FORWARDED),
    ("a path before the budget", Head(grant(refused=OVER), "POST", "/v1/models", 100, 0), NOT_FORWARDED),
    ("spent", Head(grant(refused=OVER), "POST", "/v1/messages", 100, 0), SPENT),
    ("spent, even to count tokens", Head(grant(refused=OVER), "POST", "/v1/messages/count_tokens", 1, 0), SPENT),
    ("spent before in flight", Head(grant(refused=OVER, in_flight=MAX_IN_FLIGHT), "POST", "/v1/messages", 1, 0),
     SPENT),
    ("one call short of the bound", Head(grant(in_flight=MAX_IN_FLIGHT - 1), "POST", "/v1/messages", 1, 0), THROUGH),
    ("at the bound in flight", Head(grant(in_flight=MAX_IN_FLIGHT), "POST", "/v1/messages", 1, 0), IN_FLIGHT),
    ("in flight before the body's size", Head(grant(in_flight=MAX_IN_FLIGHT), "POST", "/v1/messages", MAX_BODY + 1,
                                              0), IN_FLIGHT),
    ("a body of the most", Head(grant(), "POST", "/v1/messages", MAX_BODY, 0), THROUGH),
    ("a body a byte over", Head(grant(), "POST", "/v1/messages", MAX_BODY + 1, 0), TOO_BIG),
    ("a body over before the run's bodies", Head(grant(), "POST", "/v1/messages", MAX_BODY + 1, MAX_RUN_BODY_BYTES),
     TOO_BIG),
    ("the run's bodies to the byte", Head(grant(), "POST", "/v1/messages", MAX_BODY,
                                          MAX_RUN_BODY_BYTES - MAX_BODY), THROUGH),
    ("the run's bodies a byte over", Head(grant(), "POST", "/v1/messages", MAX_BODY,
                                          MAX_RUN_BODY_BYTES - MAX_BODY + 1), BODIES),
]


@pytest.mark.parametrize(("head", "expected"), [(h, e) for _, h, e in HEADS], ids=[n for n, _, _ in HEADS])
def test_a_request_head_is_let_through_or_refused_before_its_body_is_read(head: Head, expected: Decision) -> None:
    assert on_head(head) == expected


def ask(*, tools: list[Mapping[str, object]] | None = None, blocks: list[Mapping[str, object]] | None = None,
        system: list[Mapping[str, object]] | None = None, mcp: bool = False) -> bytes:
    body: dict[str, object] = {"model": "claude-sonnet-4-5", "max_tokens": 100,
                               "messages": [{"role": "user", "content": blocks or "hello"}]}
    if tools is not None:
        body["tools"] = tools
    if system is not None:
        body["system"] = system
    if mcp:
        body["mcp_servers"] = [{"type": "url", "url": "https://mcp.example", "name": "x"}]
    return msgspec.json.encode(body)


CLIENT_TOOL = {"name": "Bash", "input_schema": {"type": "object"}}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}
URL_IMAGE = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
FILE_DOC = {"type": "document", "source": {"type": "file", "file_id": "file_123"}}
B64_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
NESTED_URL = {"type": "tool_result", "tool_use_id": "t1", "content": [
    {"type": "document", "source": {"type": "url", "url": "https://example.com/x.pdf"}}]}
UPLOAD = {"type": "container_upload", "file_id": "file_9"}

ASKS: list[tuple[str, Grant, bytes, Decision | tuple[int, tuple[str, ...], tuple[str, ...]]]] = [
    ("text", grant(), ask(), THROUGH),
    ("a client tool", grant(), ask(tools=[CLIENT_TOOL]), THROUGH),
    ("a picture of its own", grant(), ask(blocks=[B64_IMAGE]), THROUGH),
    ("a server tool it may not use", grant(), ask(tools=[CLIENT_TOOL, WEB_SEARCH]),
     (403, ("server_tools",), ("web_search",))),
    ("a server tool its tenant lists", grant(tools=frozenset({"web_search"})), ask(tools=[WEB_SEARCH]), THROUGH),
    ("MCP servers", grant(), ask(mcp=True), (403, ("server_tools",), ("mcp_servers",))),
    ("a picture at a URL", grant(), ask(blocks=[URL_IMAGE]), (403, ("url_sources",), ())),
    ("a URL its tenant allows", grant(tools=frozenset({"url_sources"})), ask(blocks=[URL_IMAGE]), THROUGH),
    ("an uploaded file", grant(), ask(blocks=[FILE_DOC]), (403, ("file_sources",), ())),
    ("a container upload", grant(), ask(blocks=[UPLOAD]), (403, ("file_sources",), ())),
    ("a URL deep in a tool result", grant(), ask(blocks=[NESTED_URL]), (403, ("url_sources",), ())),
    ("a URL in the system prompt", grant(), ask(system=[URL_IMAGE]), (403, ("url_sources",), ())),
    ("a URL allowed, a file not", grant(tools=frozenset({"url_sources"})), ask(blocks=[URL_IMAGE, FILE_DOC]),
     (403, ("file_sources",), ())),
    ("tools and sources together", grant(), ask(tools=[WEB_SEARCH], blocks=[FILE_DOC, URL_IMAGE]),
     (403, ("server_tools", "file_sources", "url_sources"), ("web_search",))),
    ("spent while its body came", grant(refused=OVER), ask(), SPENT),
    ("egress before the budget", grant(refused=OVER), ask(tools=[WEB_SEARCH]), (403, ("server_tools",),
                                                                              ("web_search",))),
]


@pytest.mark.parametrize(("g", "body", "expected"), [(g, b, e) for _, g, b, e in ASKS], ids=[n for n, *_ in ASKS])
def test_a_decoded_request_is_refused_for_what_the_provider_would_fetch_or_run_for_it(
        g: Grant, body: bytes, expected: Decision | tuple[int, tuple[str, ...], tuple[str, ...]]) -> None:
    decoded = msgspec.json.decode(body, type=Ask)
    decided = on_ask(g, decoded, contents(decoded).fetched)
    if not isinstance(expected, tuple):
        assert decided == expected
        return
    status, kinds, tools = expected
    assert isinstance(decided, EgressRefused) and decided.audit is Audit.EGRESS
    assert (decided.status, decided.error, decided.kinds, decided.tools) == (status, "permission_error", kinds, tools)
    assert sorted(decided.sources or {}) == sorted(k for k in kinds if k != "server_tools")
    assert "tenants file" in decided.why  # the sentence says what to do
    if tools:
        assert decided.why.startswith(f"server-side tool(s) {', '.join(tools)} are not forwarded")
    else:
        assert "send the content itself" in decided.why


BUDGETS: list[tuple[str, Held | Refused, Held | Refuse]] = [
    ("a hold", Held(id="h1", day="2026-12-06"), Held(id="h1", day="2026-12-06")),
    ("no budget: nothing held", Held(id=None, day="2026-12-06"), Held(id=None, day="2026-12-06")),
    ("spent at a cap", Refused(OVER, final=True), SPENT),
    ("held by the calls in flight", Refused("the calls in flight hold the rest", final=False),
     refuse(429, "rate_limit_error", "the calls in flight hold the rest", Audit.BOUND, "budget_held")),
]


@pytest.mark.parametrize(("admitted", "expected"), [(a, e) for _, a, e in BUDGETS], ids=[n for n, *_ in BUDGETS])
def test_the_meters_answer_is_a_hold_a_403_or_a_429(admitted: Held | Refused, expected: Held | Refuse) -> None:
    assert on_budget(admitted) == expected


def test_a_body_that_is_not_json_is_a_400_that_says_what_to_send() -> None:
    decided = undecodable("JSON is malformed: invalid character (byte 0)")
    assert (decided.status, decided.error, decided.audit) == (400, "invalid_request_error", Audit.NONE)
    assert "JSON is malformed" in decided.why and "send a JSON object" in decided.why


TENANT = [("x-api-key", "sk-tenant"), ("anthropic-beta", "oauth-2025-04-20")]
HEADERS: list[tuple[str, list[tuple[bytes, bytes]], Mapping[str, str]]] = [
    ("the API's own", [(b"anthropic-version", b"2023-06-01"), (b"content-type", b"application/json")],
     {"anthropic-version": "2023-06-01", "content-type": "application/json"}),
    ("the run's key is the tenant's", [(b"x-api-key", b"flower-run-abc")], {"x-api-key": "sk-tenant"}),
    ("no authorization, cookie or proxy header", [(b"authorization", b"Bearer x"), (b"cookie", b"a=b"),
                                                  (b"x-forwarded-for", b"10.0.0.1")], {}),
    ("known betas only, joined with the tenant's", [(b"anthropic-beta", b"claude-code-20250219, files-api-2025-04-14")],
     {"anthropic-beta": "claude-code-20250219,oauth-2025-04-20"}),
    ("a control character", [(b"user-agent", b"claude-cli\x1b[31m")], {}),
    ("a value over 256 bytes", [(b"x-claude-code-session-id", b"a" * 257)], {}),
    ("a value of 256 bytes", [(b"x-claude-code-session-id", b"a" * 256)], {"x-claude-code-session-id": "a" * 256}),
]


@pytest.mark.parametrize(("run", "expected"), [(r, e) for _, r, e in HEADERS], ids=[n for n, *_ in HEADERS])
def test_what_of_a_runs_headers_reaches_the_provider(run: list[tuple[bytes, bytes]],
                                                     expected: Mapping[str, str]) -> None:
    out = passed_headers(run, TENANT)
    names = [name for name, _ in out]
    assert len(names) == len(set(names)), f"a header twice: {out}"
    got = dict(out)
    assert got.pop("accept-encoding") == "identity" and got.pop("x-api-key") == "sk-tenant"
    assert got.pop("anthropic-beta", "oauth-2025-04-20") == expected.get("anthropic-beta", "oauth-2025-04-20")
    assert got == {k: v for k, v in expected.items() if k not in ("x-api-key", "anthropic-beta")}

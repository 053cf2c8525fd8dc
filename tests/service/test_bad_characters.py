"""Characters a database cannot store — a NUL byte, half of a UTF-16 surrogate pair — in an ask or a run id are a
400 (or a 404) with a sentence, on SQLite and on PostgreSQL alike: never a 500, never an SQL error, nothing queued."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from _service_helpers import Deployment, Service

BAD_ASKS = [
    (b'{"ask": "fix the bug\\u0000 and the test"}', "`ask` holds a NUL byte"),
    (b'{"ask": "\\u0000"}', "`ask` holds a NUL byte"),
    (b'{"ask": "half a pair \\ud800 here"}', "surrogate pair"),  # the JSON decoder's own sentence
    (b'{"ask": "a bell \\u0007 rings"}', "`ask` holds a control character"),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def service(request: pytest.FixtureRequest, tmp_path: Path, services: list[Service]) -> Iterator[Service]:
    extra = ""
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
        extra = f'database_url = "{url}"\n'
    svc = Service(Deployment(tmp_path, extra_config=extra)).start(timeout=120)
    services.append(svc)
    yield svc


@pytest.mark.parametrize("body, says", BAD_ASKS, ids=["nul", "only-nul", "surrogate", "bell"])
def test_an_ask_with_a_character_no_database_keeps_is_400_with_a_sentence_and_queues_nothing(
        service: Service, body: bytes, says: str) -> None:
    acme = service.client("acme")
    r = acme.post("/v1/runs", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert says in error and "SQL" not in error and "Traceback" not in r.text, error
    assert acme.get("/v1/runs").json()["runs"] == []
    assert not [line for line in service.lines() if line.get("event") == "api.unhandled"]


@pytest.mark.parametrize("path", ["/v1/runs/20261205%00-abc", "/v1/runs/20261205%00-abc/cancel",
                                  "/v1/runs/2026%ED%A0%80-abcdef"])
def test_a_run_id_with_a_nul_byte_is_a_404_not_a_500(service: Service, path: str) -> None:
    acme = service.client("acme")
    r = acme.request("POST" if path.endswith("cancel") else "GET", path)
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"] and "SQL" not in r.text
    assert not [line for line in service.lines() if line.get("event") == "api.unhandled"]

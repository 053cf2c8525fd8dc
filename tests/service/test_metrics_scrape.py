"""``GET /metrics`` tells no tenant's name to a peer without the scrape token: the same metrics summed over tenants;
the operator's scraper, with ``Authorization: Bearer <scrape token>``, sees them per tenant; a wrong token is a
401, and so is a token sent to a service that has none."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from litestar.exceptions import NotAuthorizedException
from prometheus_client.parser import text_string_to_metric_families

from _service_helpers import SCRAPE, TOKENS, Deployment, Service, scrape_config
from service.api.scrape import ScrapeToken
from service.errors import ServiceConfigError


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _no_tenant_in(text: str) -> None:
    assert "tenant=" not in text and not any(name in text for name in TOKENS), text


def test_a_scrape_without_the_token_sees_the_metrics_summed_and_no_tenants_name(tmp_path: Path,
                                                                                services: list[Service]) -> None:
    dep = Deployment(tmp_path, extra_config=scrape_config(tmp_path))
    service = Service(dep).start()
    services.append(service)
    acme = service.client("acme")
    with acme.stream("GET", "/v1/runs/" + acme.post("/v1/runs", json={"ask": "数一数"}).json()["id"] + "/events"):
        anonymous = httpx.get(f"{service.url}/metrics")
        scraper = httpx.get(f"{service.url}/metrics", headers=SCRAPE)
    assert anonymous.status_code == 200 and scraper.status_code == 200
    _no_tenant_in(anonymous.text)
    summed, per_tenant = _samples(anonymous.text), _samples(scraper.text)
    assert per_tenant[("flower_sse_streams", (("tenant", "acme"),))] == 1
    assert per_tenant[("flower_sse_streams", (("tenant", "beta"),))] == 0
    assert summed[("flower_sse_streams", ())] == 1, "the same figure, summed over tenants"
    assert summed[("flower_backend_up", (("backend", "local"),))] == 1
    for bad in ({"Authorization": "Bearer not-the-scrape-token-at-all"}, {"Authorization": f"Bearer {TOKENS['acme']}"}):
        r = httpx.get(f"{service.url}/metrics", headers=bad)
        assert r.status_code == 401 and "scrape token" in r.json()["error"], r.text
        _no_tenant_in(r.text)


def test_without_a_scrape_token_configured_every_scrape_is_summed(tmp_path: Path, services: list[Service]) -> None:
    service = Service(Deployment(tmp_path)).start()
    services.append(service)
    r = httpx.get(f"{service.url}/metrics")
    assert r.status_code == 200 and "flower_sse_streams" in r.text
    _no_tenant_in(r.text)
    r = httpx.get(f"{service.url}/metrics", headers=SCRAPE)
    assert r.status_code == 401 and "has no scrape token" in r.json()["error"], r.text


def test_a_rotated_scrape_token_takes_over_and_an_emptied_file_keeps_the_last_good_one(tmp_path: Path) -> None:
    path = tmp_path / "scrape.token"
    path.write_text("first-token-0123456789\n")
    scrape = ScrapeToken(str(path))
    assert scrape.per_tenant("Bearer first-token-0123456789") and not scrape.per_tenant("")
    path.write_text("second-token-0123456789\n")
    os.utime(path, ns=(1, 1))  # another stamp, whatever the clock's resolution
    assert scrape.per_tenant("Bearer second-token-0123456789")
    with pytest.raises(NotAuthorizedException):
        scrape.per_tenant("Bearer first-token-0123456789")
    path.write_text("")
    assert scrape.per_tenant("Bearer second-token-0123456789"), "an emptied file: the last good token holds"
    with pytest.raises(ServiceConfigError, match="shorter than 16 characters"):
        ScrapeToken(str(path))
    with pytest.raises(ServiceConfigError, match="cannot be read"):
        ScrapeToken(str(tmp_path / "absent"))

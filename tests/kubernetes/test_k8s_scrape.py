"""The chart's scrape token: named by ``metrics.scrapeSecret`` (a Secret the operator creates), mounted into the
service's pod as its ``metrics_token_file`` and sent by the ServiceMonitor — so Prometheus sees per-tenant metrics
and nobody else does. Without it, nothing of it is rendered (every scrape gets the summed metrics)."""

from __future__ import annotations

import pytest
from _k8s_checks import documents, helm_render, validate
from helm_python import HelmValuesError
from test_k8s_chart import by_kind, container, rendered

from service.config import ENV_PREFIX, ServiceConfig

SCRAPE = {"metrics": {"scrapeSecret": {"name": "flower-scrape", "key": "prometheus"},
                      "serviceMonitor": {"enabled": True}}}


def test_the_scrape_token_goes_from_its_secret_to_the_service_and_the_service_monitor() -> None:
    docs = documents(helm_render(SCRAPE, release="team-a", namespace="agents"))
    for doc in docs:
        if doc["kind"] != "ServiceMonitor":  # a CRD: kubernetes-validate knows only the core kinds
            validate(doc)
    kinds = by_kind(docs)
    assert "Secret" not in kinds, "the operator creates the Secret; the chart only names it"
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    c = container(kinds)
    env = {e["name"]: e.get("value") for e in c["env"]}
    path = env[f"{ENV_PREFIX}METRICS_TOKEN_FILE"]
    assert "metrics_token_file" in ServiceConfig.__struct_fields__
    mount = next(m for m in c["volumeMounts"] if m["name"] == "scrape")
    assert mount["readOnly"] and path == f"{mount['mountPath']}/token"
    volume = next(v for v in pod["volumes"] if v["name"] == "scrape")
    assert volume["secret"] == {"secretName": "flower-scrape", "items": [{"key": "prometheus", "path": "token"}],
                                "defaultMode": 0o440}
    (endpoint,) = kinds["ServiceMonitor"]["spec"]["endpoints"]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "flower-scrape",
                                                                           "key": "prometheus"}}


def test_without_a_scrape_secret_nothing_of_it_is_rendered() -> None:
    docs = rendered({"metrics": {"serviceMonitor": {"enabled": True}}})
    c = container(docs)
    assert not [e for e in c["env"] if e["name"].endswith("METRICS_TOKEN_FILE")]
    assert not [v for v in docs["Deployment"]["spec"]["template"]["spec"]["volumes"] if v["name"] == "scrape"]
    (endpoint,) = docs["ServiceMonitor"]["spec"]["endpoints"]
    assert "authorization" not in endpoint


def test_a_scrape_secret_that_is_not_a_name_is_refused_by_the_schema() -> None:
    with pytest.raises(HelmValuesError):
        helm_render({"metrics": {"scrapeSecret": {"name": "Not A Name", "key": "scrape"}}})

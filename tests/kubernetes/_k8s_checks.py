"""Offline checks of Kubernetes documents: the API schema (kubernetes-validate, pinned versions) and the name and
label rules the schema does not carry (the API server enforces them; no cluster is reachable here)."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate

# The oldest Kubernetes the chart declares (Chart.yaml kubeVersion) and a recent one; both schemas ship with
# kubernetes-validate, so the result does not depend on which release of it is installed.
K8S_VERSIONS = ("1.27.0", "1.33.0")

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
# Kinds whose names must be DNS labels (≤ 63), not just subdomains; a Job's name becomes its pods' label value.
LABEL_NAMED = {"Service", "Job", "Deployment", "Namespace"}


def check_labels(labels: dict[str, str], where: str) -> None:
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        assert not prefix or DNS_SUBDOMAIN.fullmatch(prefix), f"{where}: label key prefix {prefix!r}"
        assert LABEL_NAME.fullmatch(name), f"{where}: label key {key!r}"
        assert isinstance(value, str) and LABEL_VALUE.fullmatch(value), f"{where}: label {key}={value!r}"


def check_names(doc: dict[str, Any]) -> None:
    kind, meta = doc["kind"], doc["metadata"]
    if kind.endswith("List"):
        for item in doc.get("items") or []:
            check_names({"kind": kind[:-4], **item})
        return
    rule = DNS_LABEL if kind in LABEL_NAMED else DNS_SUBDOMAIN
    what = "DNS label" if rule is DNS_LABEL else "DNS subdomain"
    assert rule.fullmatch(meta["name"]), f"{kind} name {meta['name']!r} is not a valid {what}"
    check_labels(meta.get("labels") or {}, f"{kind}/{meta['name']}")
    template = (doc.get("spec") or {}).get("template") or {}
    check_labels((template.get("metadata") or {}).get("labels") or {}, f"{kind}/{meta['name']} pod template")


def validate(doc: dict[str, Any], versions: tuple[str, ...] = K8S_VERSIONS) -> None:
    """Strict schema validation against every pinned version, then the name/label rules."""
    for version in versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')} is not valid "
                                 f"Kubernetes {version}: {e.message} at {'.'.join(map(str, e.path))}") from None
    check_names(doc)

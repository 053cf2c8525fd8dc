"""Offline checks of Kubernetes documents: the API schema (kubernetes-validate, pinned versions) and the name and
label rules the schema does not carry (the API server enforces them; no cluster is reachable here); and the chart
rendered by Helm's own Go library (helm-python-sdk), as `helm install` renders it — no helm binary needed."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml
from helm_python.chart import Chart

CHART = Path(__file__).resolve().parents[2] / "helm"

# The value sets the chart is rendered, linted and validated with besides its defaults. OVERRIDE: every plain
# value changed and both NetworkPolicies off.
OVERRIDE = {
    "image": {"repository": "registry.example.com/flower/service", "tag": "2025.5.1"},
    "imagePullSecret": "regcred",
    "dataDir": "/srv/flower",
    "persistence": {"existingClaim": "team-data"},
    "config": {"maxRunning": 16, "pollS": 0.5, "logLevel": "DEBUG", "removeWorktree": False},
    "tenants": {"secretName": "acme-tenants"},
    "credentials": {"secretName": "acme-creds"},
    "runs": {"image": "registry.example.com/flower/sandbox:2025.5.1", "cpu": "500m", "memory": "1Gi",
             "deadlineSeconds": "7200", "networkPolicy": {"enabled": False}},
    "environment": {"registry": "registry.example.com:5000/team/flower-envs", "dockerHost": "tcp://127.0.0.1:2375",
                    "pullSecret": "envpull", "pushSecret": "envpush", "runtimeSize": "3Gi"},
    "serviceAccount": {"create": False, "name": "ops-flower"},
    "service": {"type": "NodePort", "port": 80, "networkPolicy": {"enabled": False}},
    "resources": None,
    "nodeSelector": {"pool": "agents"},
    "tolerations": [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}],
}
# HARDENED: values that trip a template engine: numbers ≥ 1e6 (Go prints 1e+06 unless the template converts them), an
# OpenShift-style uid, a claim name too long to be a label value, and every NetworkPolicy knob set.
HARDENED = {
    "persistence": {"existingClaim": "shared-flower-data-volume-of-the-platform-team-in-region-eu-west-1"},
    "config": {"maxRunning": 1000000},
    "runs": {"cpu": 0.5, "memory": "512Mi", "deadlineSeconds": 86400, "ttlSecondsAfterFinished": 1209600,
             "networkPolicy": {"extraEgress": [{"to": [{"ipBlock": {"cidr": "10.20.0.5/32"}}],
                                                "ports": [{"protocol": "TCP", "port": 3128}]}]}},
    "gateway": {"port": 9090},
    "dns": {"namespace": "openshift-dns", "podLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}},
    "service": {"networkPolicy": {
        "apiFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}],
        "kubernetesApi": {"cidrs": ["10.96.0.1/32", "172.20.0.10/32"], "ports": [6443]},
        "modelUpstream": {"cidrs": ["203.0.113.0/24", "2001:db8::/32"], "port": 8443}}},
    "securityContext": {"runAsUser": 1000680000, "runAsGroup": 1000680000},
    "scratch": {"sizeLimit": "256Mi", "medium": "Memory"},
}

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


@functools.cache
def chart() -> Chart:
    return Chart.load(CHART)


def helm_render(values: dict[str, Any] | None = None, *, release: str = "flower",
                namespace: str = "flower") -> dict[str, str]:
    """Template path (``flower/templates/...``) to its text, NOTES.txt and the test hook included. Helm checks
    the values against values.schema.json first (HelmValuesError), as ``helm install`` does."""
    return chart().render(values, name=release, namespace=namespace)


def documents(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes document of a rendering (NOTES.txt is text for the user, not a manifest)."""
    return [doc for path, text in sorted(rendered.items()) if not path.endswith("/NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels and matchExpressions) picks a pod with these labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {"Exists": key in labels, "DoesNotExist": key not in labels,
              "In": labels.get(key) in values, "NotIn": key not in labels or labels[key] not in values}[op]
        if not ok:
            return False
    return True

"""Helm's own verdicts on the chart, through its Go library (helm-python-sdk): `helm lint --strict`, the
values.schema.json check `helm install` runs, NOTES.txt and the `helm test` hook."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from _k8s_checks import CHART, HARDENED, OVERRIDE, chart, documents, helm_render, selects
from helm_python import HelmValuesError
from helm_python.chart import lint

K8S = ("v1.27.0", "v1.33.0")


@pytest.mark.parametrize("kube", K8S)
@pytest.mark.parametrize("values", [{}, OVERRIDE, HARDENED], ids=["defaults", "override", "hardened"])
def test_helm_lint_strict_finds_nothing(values, kube) -> None:
    """Strict: a warning counts as an error. Not even an info is left (the icon was one)."""
    report = lint(CHART, values, strict=True, kube_version=kube, namespace="flower")
    assert report["total_charts_linted"] == 1
    assert report["messages"] == [] and report["errors"] == []


def test_helm_lint_does_report_a_broken_chart(tmp_path) -> None:
    """The clean report above means something: the same call speaks up on a copy with faults."""
    broken = tmp_path / "flower"
    shutil.copytree(CHART, broken)
    meta = yaml.safe_load((broken / "Chart.yaml").read_text())
    del meta["icon"]
    (broken / "Chart.yaml").write_text(yaml.safe_dump(meta))
    (broken / "templates" / "service.yaml").write_text("kind: Service\nmetadata: {{ .Values.nope.deeper }}\n")
    report = lint(broken, strict=True)
    found = [(m["severity"], m["path"]) for m in report["messages"]]
    assert (1, "Chart.yaml") in found and (3, "templates/") in found, report
    assert "icon is recommended" in str(report) and "nil pointer" in str(report)


# What a user gets wrong, and the key Helm's message names: a port as text, a typo'd key, root, no memory limit,
# an unquoted tag, the gateway on the API's port, a CIDR without its length, a relative data_dir, too short a TTL.
BAD = [
    ({"service": {"port": "eighty"}}, "at '/service/port': got string, want integer"),
    ({"persistance": {"size": "10Gi"}}, "additional properties 'persistance' not allowed"),
    ({"securityContext": {"runAsUser": 0}}, "at '/securityContext/runAsUser': minimum: got 0, want 1"),
    ({"runs": {"memory": ""}}, "at '/runs/memory': '' does not match pattern"),
    ({"image": {"tag": 1.0}}, "at '/image/tag': got number, want string"),
    ({"gateway": {"port": 8080}}, "at '/gateway/port'"),
    ({"service": {"networkPolicy": {"kubernetesApi": {"cidrs": ["10.0.0.1"]}}}},
     "at '/service/networkPolicy/kubernetesApi/cidrs/0': '10.0.0.1' does not match pattern"),
    ({"dataDir": "data"}, "at '/dataDir': 'data' does not match pattern"),
    ({"runs": {"ttlSecondsAfterFinished": 5}}, "at '/runs/ttlSecondsAfterFinished'"),
    ({"serviceAccount": {"create": False}}, "at '/serviceAccount/name': minLength: got 0, want 1"),
    ({"scratch": {"medium": "memory"}}, "at '/scratch/medium'"),
    ({"environment": {"registry": "https://registry.example.com/flower"}}, "at '/environment/registry'"),
    ({"environment": {"dockerHost": "/var/run/docker.sock"}}, "at '/environment/dockerHost'"),
]


@pytest.mark.parametrize("values,message", BAD, ids=[next(iter(v)) + "-" + str(i) for i, (v, _) in enumerate(BAD)])
def test_the_schema_rejects_a_wrong_value_before_anything_renders(values, message) -> None:
    """Chart.render checks values.schema.json first, as `helm install`/`helm template` do."""
    with pytest.raises(HelmValuesError) as e:
        helm_render(values)
    assert "values don't meet the specifications of the schema" in str(e.value)
    assert message in str(e.value)
    assert lint(CHART, values, strict=True)["errors"], "helm lint -f with the same values fails too"


def test_the_schema_covers_every_value() -> None:
    """Every key of values.yaml is in the schema and nothing else is accepted, down to the leaves (but `global`,
    which a parent chart passes to its subcharts)."""
    schema = chart().schema

    def walk(values, node, where):
        if node.get("additionalProperties") is False:
            assert set(values) == set(node["properties"]) - {"global"}, where
        for key, value in values.items():
            sub = (node.get("properties") or {}).get(key)
            assert sub is not None, f"{where}.{key} is not in values.schema.json"
            if isinstance(value, dict) and sub.get("properties"):
                walk(value, sub, f"{where}.{key}")

    assert schema["additionalProperties"] is False
    walk(chart().values, schema, "values")


def notes(values: dict | None = None, release: str = "flower", namespace: str = "flower") -> str:
    return helm_render(values, release=release, namespace=namespace)["flower/templates/NOTES.txt"]


def test_the_notes_give_the_next_steps_with_this_release_s_names() -> None:
    text = notes(OVERRIDE, "team-a", "agents")
    for step in ("kubectl -n agents create secret generic acme-tenants --from-file=tenants.toml",
                 "kubectl -n agents create secret generic acme-creds",
                 "(claim team-data), under /srv/flower",
                 "kubectl -n agents rollout status deploy/team-a",
                 "helm test team-a -n agents",
                 "kubectl -n agents port-forward svc/team-a 8080:80",
                 "localhost:8080/v1/runs"):
        assert step in text, step
    assert "WARNING: runs.networkPolicy.enabled is false" in text
    assert "WARNING: service.networkPolicy.enabled is false" in text
    assert "NetworkPolicies only hold" not in text
    default = notes()
    assert "WARNING" not in default
    assert "only the service's model gateway (port 8081) and DNS." in default
    assert "NetworkPolicies only hold" in default


def test_the_helm_test_pod_calls_healthz_through_the_service() -> None:
    docs = documents(helm_render(release="team-a", namespace="agents"))
    (pod,) = [d for d in docs if d["kind"] == "Pod"]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    (c,) = pod["spec"]["containers"]
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "http")
    assert c["command"][-1] == f"http://{svc['metadata']['name']}.agents.svc:{port}/healthz"
    assert c["image"] == dep["spec"]["template"]["spec"]["containers"][0]["image"]  # nothing else to pull
    # never adopted by the Deployment's ReplicaSet, never an endpoint of the Service
    assert not selects(dep["spec"]["selector"], pod["metadata"]["labels"])
    assert not selects({"matchLabels": svc["spec"]["selector"]}, pod["metadata"]["labels"])
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["securityContext"] == dep["spec"]["template"]["spec"]["securityContext"]
    assert c["securityContext"] == dep["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert c["resources"]["limits"]


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802
        body = b'{"status": "ok"}' if self.path == "/healthz" else b"no"
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("status,passes", [(200, True), (503, False)])
def test_the_helm_test_pod_s_command_passes_only_on_a_healthy_answer(status, passes) -> None:
    """The pod's own command, run here against a stand-in service on 127.0.0.1 (503: scheduler stopped)."""
    (pod,) = [d for d in documents(helm_render()) if d["kind"] == "Pod"]
    python, *args, url = pod["spec"]["containers"][0]["command"]
    assert python == "python" and url.endswith("/healthz")
    handler = type("Health", (_Health,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        local = f"http://127.0.0.1:{server.server_port}/healthz"
        done = subprocess.run([sys.executable, *args, local], capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert (done.returncode == 0) is passes, done.stderr
    if passes:
        assert "200" in done.stdout
    else:
        assert "503" in done.stderr


def test_the_icon_is_an_embedded_svg() -> None:
    """Embedded, so a UI shows it where nothing can be fetched."""
    icon = chart().metadata["icon"]
    prefix = "data:image/svg+xml;base64,"
    assert icon.startswith(prefix)
    root = ET.fromstring(base64.b64decode(icon[len(prefix):], validate=True))
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and len(root) > 0

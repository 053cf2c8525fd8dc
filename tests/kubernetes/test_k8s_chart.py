"""The Helm chart, rendered without helm (tests/kubernetes/render.py) and validated with kubernetes-validate.

No helm binary and no cluster exist here: this shows the chart renders to valid Kubernetes documents that wire
the service the way the backend expects, not that a cluster runs it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from _k8s_checks import validate
from render import RenderError, render_chart, render_text

from sandbox.backends.kubernetes import API_PERMISSIONS, KubeAPI, KubernetesBackend
from service.config import load_config

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm"

OVERRIDE = {
    "image": {"repository": "registry.example.com/flower/service", "tag": "2025.5.1"},
    "imagePullSecret": "regcred",
    "dataDir": "/srv/flower",
    "persistence": {"existingClaim": "team-data"},
    "config": {"maxRunning": 16, "pollS": 0.5, "logLevel": "DEBUG", "removeWorktree": False},
    "tenants": {"secretName": "acme-tenants"},
    "credentials": {"secretName": "acme-creds"},
    "runs": {"image": "registry.example.com/flower/sandbox:2025.5.1", "cpu": "500m", "memory": "",
             "deadlineSeconds": "7200", "networkPolicy": {"enabled": False}},
    "serviceAccount": {"create": False, "name": "ops-flower"},
    "service": {"type": "NodePort", "port": 80},
    "resources": None,
    "nodeSelector": {"pool": "agents"},
    "tolerations": [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}],
}


def by_kind(docs: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for d in docs:
        assert d["kind"] not in out, f"two {d['kind']} documents"
        out[d["kind"]] = d
    return out


def container(docs: dict[str, dict]) -> dict:
    (c,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    return c


def env_of(c: dict, namespace: str) -> dict[str, str]:
    """The container's environment as the kubelet would give it (the namespace from the downward API)."""
    out = {}
    for e in c["env"]:
        if "valueFrom" in e:
            assert e["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
            out[e["name"]] = namespace
        else:
            out[e["name"]] = e["value"]
    return out


@pytest.mark.parametrize("values,release,namespace", [({}, "flower", "flower"), (OVERRIDE, "team-a", "agents")],
                         ids=["defaults", "override"])
def test_every_rendered_document_is_valid_kubernetes(values, release, namespace) -> None:
    docs = render_chart(CHART, values, release=release, namespace=namespace)
    for doc in docs:
        validate(doc)
        assert doc["metadata"]["namespace"] == namespace
    kinds = sorted(d["kind"] for d in docs)
    if values:
        assert kinds == ["ConfigMap", "Deployment", "Role", "RoleBinding", "Service"]
    else:
        assert kinds == ["ConfigMap", "Deployment", "NetworkPolicy", "PersistentVolumeClaim", "Role", "RoleBinding",
                         "Service", "ServiceAccount"]
    assert "Secret" not in kinds  # secrets are created by the operator, never rendered from values


def test_the_role_grants_exactly_what_the_backend_calls() -> None:
    docs = by_kind(render_chart(CHART))
    granted = {(g, r): frozenset(rule["verbs"]) for rule in docs["Role"]["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == API_PERMISSIONS
    binding = docs["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": docs["Role"]["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": docs["ServiceAccount"]["metadata"]["name"],
                                    "namespace": "flower"}]
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    custom = by_kind(render_chart(CHART, OVERRIDE, release="team-a", namespace="agents"))
    assert custom["RoleBinding"]["subjects"][0]["name"] == "ops-flower"
    assert custom["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == "ops-flower"


def test_the_service_pod_is_non_root_probed_and_mounts_secrets_it_does_not_define() -> None:
    docs = by_kind(render_chart(CHART))
    dep = docs["Deployment"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]["spec"]
    c = container(docs)
    # the uid the Dockerfile's service image runs as
    dockerfile = (ROOT / "Dockerfile").read_text()
    service_stage = dockerfile[dockerfile.index("AS service"):]
    uid, gid = map(int, re.search(r"^USER (\d+):(\d+)", service_stage, re.M).groups())
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (uid, gid)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["fsGroup"] == gid
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    assert c["image"] == "flower/service:0.1.0"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tenants"]["secret"] == {"secretName": "flower-tenants", "defaultMode": 0o440}
    assert volumes["credentials"]["secret"] == {"secretName": "flower-credentials", "defaultMode": 0o440}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": docs["PersistentVolumeClaim"]["metadata"]["name"]}
    assert docs["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["data"]["mountPath"] == "/var/lib/flower"
    assert mounts["tenants"]["readOnly"] and mounts["credentials"]["readOnly"]
    svc = docs["Service"]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert docs["NetworkPolicy"]["spec"] == {"podSelector": {"matchExpressions": [{"key": "flower.run",
                                                                                   "operator": "Exists"}]},
                                             "policyTypes": ["Ingress"], "ingress": []}


def test_values_hold_no_secret_material() -> None:
    import yaml

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["tenants"] == {"secretName": "flower-tenants"}
    assert values["credentials"] == {"secretName": "flower-credentials"}
    flat = yaml.safe_dump(values).lower()
    assert not re.search(r"(token|password|api_?key|sk-)", flat)


@pytest.mark.parametrize("values,release,namespace", [({}, "flower", "flower"), (OVERRIDE, "team-a", "agents")],
                         ids=["defaults", "override"])
def test_the_config_and_environment_build_the_kubernetes_backend(values, release, namespace, tmp_path) -> None:
    """The ConfigMap's service.toml loads with service.config, and the Deployment's environment gives
    KubernetesBackend.from_environment the claim the pod mounts at data_dir."""
    docs = by_kind(render_chart(CHART, values, release=release, namespace=namespace))
    toml = docs["ConfigMap"]["data"]["service.toml"]
    raw = tomllib.loads(toml)
    c = container(docs)
    env = env_of(c, namespace)
    config_path = env["FLOWER_SERVICE_CONFIG"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert config_path == f"{mounts['config']}/service.toml"
    assert raw["tenants"].startswith(mounts["tenants"] + "/")
    assert raw["data_dir"] == mounts["data"]
    assert raw["port"] == c["ports"][0]["containerPort"] and raw["host"] == "0.0.0.0"
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("")
    (tmp_path / "service.toml").write_text(toml)
    cfg = load_config(tmp_path / "service.toml", env={}, tenants=str(tenants), data_dir=str(tmp_path / "data"))
    assert cfg.backend == "kubernetes" and cfg.image == (values.get("runs", {}).get("image")
                                                         or "flower/sandbox:0.1.0")
    assert cfg.max_running == (16 if values else 4) and cfg.remove_worktree is (not values)

    pod = docs["Deployment"]["spec"]["template"]["spec"]
    claim = next(v for v in pod["volumes"] if v["name"] == "data")["persistentVolumeClaim"]["claimName"]
    backend = KubernetesBackend.from_environment(cfg.image, data_dir=raw["data_dir"], env=env,
                                                 api=KubeAPI("http://127.0.0.1:9", token="unused"))
    assert backend.claim == claim and backend.namespace == namespace
    assert str(backend.data_dir) == raw["data_dir"]
    if values:
        assert (backend.cpu, backend.memory, backend.deadline_s, backend.image_pull_secrets) == \
            ("500m", None, 7200, ["regcred"])
        assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["nodeSelector"] == {"pool": "agents"}
        assert "resources" not in c or c["resources"] in ({}, None)
    else:
        assert (backend.cpu, backend.memory, backend.deadline_s, backend.ttl_s) == ("2", "4Gi", None, 604800)


def test_the_service_builds_a_kubernetes_backend_for_backend_kubernetes(tmp_path, monkeypatch) -> None:
    from service.app import make_backend

    tenants = tmp_path / "tenants.toml"
    tenants.write_text("")
    cfg = load_config(env={}, tenants=str(tenants), data_dir=str(tmp_path / "data"), backend="kubernetes",
                      image="flower/sandbox:0.1.0")
    monkeypatch.setenv("FLOWER_K8S_CLAIM", "flower-data")
    monkeypatch.setenv("FLOWER_K8S_NAMESPACE", "flower")
    monkeypatch.setattr(KubeAPI, "in_cluster", classmethod(lambda cls, *a, **k: KubeAPI("http://127.0.0.1:9")))
    backend = make_backend(cfg)
    assert isinstance(backend, KubernetesBackend)
    assert set(backend.labels) == {"flower.service"} and backend.claim == "flower-data"
    assert backend.image == "flower/sandbox:0.1.0" and backend.data_dir == cfg.data_path


# -- the renderer itself: helm's meaning for the subset, a loud failure for the rest ------------------------------
CTX = {"Values": {"a": {"b": "x y", "n": 8080, "f": 0.25, "on": True, "off": False, "empty": "", "m": {"k": [1, 2]}},
                  "big": 1000000},
       "Release": {"Name": "rel", "Namespace": "ns"}, "Chart": {"Name": "flower"}}


def test_the_renderer_renders_the_subset_like_helm() -> None:
    assert render_text("n: {{ .Values.a.n }} f: {{ .Values.a.f }} q: {{ .Values.a.b | quote }}", CTX) == \
        'n: 8080 f: 0.25 q: "x y"'
    assert render_text("on: {{ .Values.a.on }} {{ .Values.a.n | quote }}", CTX) == 'on: true "8080"'
    assert render_text("m:{{ toYaml .Values.a.m | nindent 2 }}", CTX) == "m:\n  k:\n  - 1\n  - 2"
    text = "a:\n  {{- if .Values.a.off }}\n  x: 1\n  {{- else }}\n  y: 2\n  {{- end }}\nb: {{ .Release.Name }}\n"
    assert render_text(text, CTX) == "a:\n  y: 2\nb: rel\n"
    assert render_text("{{- if .Values.missing }}no{{- end }}ok", CTX) == "ok"
    assert render_text("{{- if .Values.a.empty }}no{{- end }}ok", CTX) == "ok"


@pytest.mark.parametrize("text,why", [
    ("{{ range .Values.a }}x{{ end }}", "unsupported"),
    ('{{ include "x" . }}', "unsupported"),
    ("{{ .Values.a.b | default 1 }}", "unsupported function"),
    ("{{ .Values.a.b | upper }}", "unsupported function"),
    ("{{ .Values.nope }}", "has no value"),
    ("{{ .Values.a.m }}", "toYaml"),
    ("{{ .Values.big }}", "exponent"),
    ("{{ if .Values.a.on }}x", "without `end`"),
    ("{{ if not .Values.a.on }}x{{ end }}", "unsupported condition"),
    ("{{ if .Values.a.off }}{{ .Values.a.b | trunc 3 }}{{ end }}", "unsupported function"),  # even when not taken
    ("{{ $x := 1 }}", "unsupported"),
])
def test_the_renderer_fails_loudly_on_anything_else(text, why) -> None:
    with pytest.raises(RenderError, match=why):
        render_text(text, CTX)

"""The Helm chart, rendered by Helm's own library (helm-python-sdk) and validated with kubernetes-validate.

No helm binary and no cluster exist here: this shows the chart renders to valid Kubernetes documents that wire
the service and its runs' pods the way the backend expects, not that a cluster runs it.
"""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml
from _k8s_checks import CHART, HARDENED, OVERRIDE, chart, documents, helm_render, selects, validate

from sandbox.backends.kubernetes import API_PERMISSIONS, KubeAPI, KubernetesBackend, job_manifest, label_value
from sandbox.layout import RunLayout
from sandbox.spec import RunSpec
from service.config import load_config

ROOT = CHART.parent

# name: (values, release, namespace)
SETS = {"defaults": ({}, "flower", "flower"), "override": (OVERRIDE, "team-a", "agents"),
        "hardened": (HARDENED, "flower", "platform")}


def by_kind(docs: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for d in docs:
        key = d["kind"] if d["kind"] != "NetworkPolicy" else f"NetworkPolicy/{d['metadata']['name']}"
        assert key not in out, f"two {key} documents"
        out[key] = d
    return out


def rendered(values: dict | None = None, release: str = "flower", namespace: str = "flower") -> dict[str, dict]:
    return by_kind(documents(helm_render(values, release=release, namespace=namespace)))


def merged(values: dict) -> dict:
    """The values a release uses: the chart's defaults under the overrides (Helm's own merge)."""
    return chart().merge_values(values)


def claim_of(docs: dict[str, dict]) -> str:
    volumes = docs["Deployment"]["spec"]["template"]["spec"]["volumes"]
    return next(v for v in volumes if v["name"] == "data")["persistentVolumeClaim"]["claimName"]


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


@pytest.mark.parametrize("name", SETS)
def test_every_rendered_document_is_valid_kubernetes(name) -> None:
    values, release, namespace = SETS[name]
    docs = documents(helm_render(values, release=release, namespace=namespace))
    for doc in docs:
        validate(doc)
        assert doc["metadata"]["namespace"] == namespace
    kinds = sorted(d["kind"] for d in docs)
    common = ["ConfigMap", "Deployment", "Pod", "Role", "RoleBinding", "Service"]
    expected = {"defaults": common + ["NetworkPolicy"] * 2 + ["PersistentVolumeClaim", "ServiceAccount"],
                "override": common,
                "hardened": common + ["NetworkPolicy"] * 2 + ["ServiceAccount"]}[name]
    assert kinds == sorted(expected)
    assert "Secret" not in kinds  # secrets are created by the operator, never rendered from values


def test_the_role_grants_exactly_what_the_backend_calls() -> None:
    docs = rendered()
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
    assert pod["automountServiceAccountToken"] is True  # the service calls the API
    assert docs["ServiceAccount"]["automountServiceAccountToken"] is False  # nothing else borrowing it does
    custom = rendered(OVERRIDE, "team-a", "agents")
    assert custom["RoleBinding"]["subjects"][0]["name"] == "ops-flower"
    assert custom["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == "ops-flower"


@pytest.mark.parametrize("name", SETS)
def test_the_service_pod_has_the_docker_hardening(name) -> None:
    """Non-root, read-only root, no capabilities, no escalation, RuntimeDefault seccomp, bounded scratch."""
    values, release, namespace = SETS[name]
    docs = rendered(values, release, namespace)
    v = merged(values)
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    uid, gid = v["securityContext"]["runAsUser"], v["securityContext"]["runAsGroup"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid, "fsGroup": gid,
                                      "fsGroupChangePolicy": "OnRootMismatch",
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    assert all(type(pod["securityContext"][k]) is int for k in ("runAsUser", "runAsGroup", "fsGroup"))
    assert container(docs)["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                  "privileged": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["enableServiceLinks"] is False
    scratch = {"sizeLimit": v["scratch"]["sizeLimit"], **({"medium": "Memory"} if v["scratch"]["medium"] else {})}
    volumes = {vol["name"]: vol for vol in pod["volumes"]}
    assert volumes["tmp"]["emptyDir"] == volumes["home"]["emptyDir"] == scratch
    mounts = {m["mountPath"]: m["name"] for m in container(docs)["volumeMounts"]}
    assert mounts["/tmp"] == "tmp" and mounts["/home/flower"] == "home"


def test_the_service_pod_runs_as_the_dockerfile_user_and_mounts_secrets_it_does_not_define() -> None:
    docs = rendered()
    dep = docs["Deployment"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]["spec"]
    c = container(docs)
    dockerfile = (ROOT / "Dockerfile").read_text()
    service_stage = dockerfile[dockerfile.index("AS service"):]
    uid, gid = map(int, re.search(r"^USER (\d+):(\d+)", service_stage, re.M).groups())
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (uid, gid)
    assert c["image"] == "flower/service:0.1.0"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                          {"name": "gateway", "containerPort": 8081, "protocol": "TCP"}]
    assert c["resources"]["limits"]["memory"] == "2Gi"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tenants"]["secret"] == {"secretName": "flower-tenants", "defaultMode": 0o440}
    assert volumes["credentials"]["secret"] == {"secretName": "flower-credentials", "defaultMode": 0o440}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": docs["PersistentVolumeClaim"]["metadata"]["name"]}
    assert docs["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]
    assert docs["PersistentVolumeClaim"]["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["data"]["mountPath"] == "/var/lib/flower"
    assert mounts["tenants"]["readOnly"] and mounts["credentials"]["readOnly"] and mounts["config"]["readOnly"]
    svc = docs["Service"]
    assert svc["spec"]["selector"] and svc["spec"]["selector"] == dep["spec"]["template"]["metadata"]["labels"]
    assert selects(dep["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == \
        [("http", 8080, "http"), ("gateway", 8081, "gateway")]


def test_a_changed_config_rolls_the_service_pod() -> None:
    """The service reads service.toml once: the pod template carries the ConfigMap's checksum."""
    def checksum(values):
        return rendered(values)["Deployment"]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum({}) == checksum({"service": {"port": 80}})
    assert checksum({}) != checksum({"config": {"maxRunning": 5}})


def test_values_hold_no_secret_material() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["tenants"] == {"secretName": "flower-tenants"}
    assert values["credentials"] == {"secretName": "flower-credentials"}
    flat = yaml.safe_dump(values).lower()
    assert not re.search(r"(token|password|api_?key|sk-)", flat)


@pytest.mark.parametrize("name", SETS)
def test_the_config_and_environment_build_the_kubernetes_backend(name, tmp_path) -> None:
    """The ConfigMap's service.toml loads with service.config, and the Deployment's environment gives
    KubernetesBackend.from_environment the claim the pod mounts at data_dir (numbers never in 1e+06 form)."""
    values, release, namespace = SETS[name]
    docs = rendered(values, release, namespace)
    v = merged(values)
    toml = docs["ConfigMap"]["data"]["service.toml"]
    raw = tomllib.loads(toml)
    c = container(docs)
    env = env_of(c, namespace)
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert env["FLOWER_SERVICE_CONFIG"] == f"{mounts['config']}/service.toml"
    assert raw["tenants"].startswith(mounts["tenants"] + "/")
    assert raw["data_dir"] == mounts["data"] == v["dataDir"]
    assert raw["port"] == c["ports"][0]["containerPort"] and raw["host"] == "0.0.0.0"
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("")
    (tmp_path / "service.toml").write_text(toml)
    cfg = load_config(tmp_path / "service.toml", env={}, tenants=str(tenants), data_dir=str(tmp_path / "data"))
    assert cfg.backend == "kubernetes" and cfg.image == v["runs"]["image"]
    assert cfg.max_running == v["config"]["maxRunning"] and type(raw["max_running"]) is int
    assert cfg.remove_worktree is v["config"]["removeWorktree"]

    pod = docs["Deployment"]["spec"]["template"]["spec"]
    claim = claim_of(docs)
    assert claim == (v["persistence"]["existingClaim"] or f"{release}-data")
    backend = KubernetesBackend.from_environment(cfg.image, data_dir=raw["data_dir"], env=env,
                                                 api=KubeAPI("http://127.0.0.1:9", token="unused"))
    assert backend.claim == claim and backend.namespace == namespace
    assert str(backend.data_dir) == raw["data_dir"]
    want = {"defaults": ("2", "4Gi", None, 604800, []), "override": ("500m", "1Gi", 7200, 604800, ["regcred"]),
            "hardened": ("0.5", "512Mi", 86400, 1209600, [])}[name]
    assert (backend.cpu, backend.memory, backend.deadline_s, backend.ttl_s, backend.image_pull_secrets) == want
    # a team's environment: the registry in service.toml, the rest in the pod's environment and mounts
    assert cfg.environment_registry == v["environment"]["registry"]
    if cfg.environment_registry:
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        login = next(x for x in pod["volumes"] if x["name"] == "registry-login")["secret"]
        assert str(backend.registry_auth) == f"{mounts['registry-login']}/{login['items'][0]['path']}"
        assert login["secretName"] == v["environment"]["pushSecret"]
        assert login["items"][0]["key"] == ".dockerconfigjson"  # a kubernetes.io/dockerconfigjson Secret
        assert backend.environment_pull_secrets == [v["environment"]["pullSecret"]]
        assert backend.runtime_size == v["environment"]["runtimeSize"]
        assert env["DOCKER_HOST"] == v["environment"]["dockerHost"]
    else:
        assert backend.registry_auth is None and backend.environment_pull_secrets == []
        assert "DOCKER_HOST" not in env and "registry-login" not in {x["name"] for x in pod["volumes"]}
    if values is OVERRIDE:
        assert pod["imagePullSecrets"] == [{"name": "regcred"}] and pod["nodeSelector"] == {"pool": "agents"}
        assert "resources" not in c


def test_the_service_builds_a_kubernetes_backend_for_backend_kubernetes(tmp_path, monkeypatch) -> None:
    from service.app import make_backend

    tenants = tmp_path / "tenants.toml"
    tenants.write_text("")
    cfg = load_config(env={}, tenants=str(tenants), data_dir=str(tmp_path / "data"), backend="kubernetes",
                      image="flower/sandbox:0.1.0", gateway_port=8081, gateway_url="http://flower.flower.svc:8081")
    monkeypatch.setenv("FLOWER_K8S_CLAIM", "flower-data")
    monkeypatch.setenv("FLOWER_K8S_NAMESPACE", "flower")
    monkeypatch.setattr(KubeAPI, "in_cluster", classmethod(lambda cls, *a, **k: KubeAPI("http://127.0.0.1:9")))
    backend = make_backend(cfg)
    assert isinstance(backend, KubernetesBackend)
    assert set(backend.labels) == {"flower.service"} and backend.claim == "flower-data"
    assert backend.image == "flower/sandbox:0.1.0" and backend.data_dir == cfg.data_path


def test_a_registry_without_the_engine_that_pushes_to_it_is_refused_by_name() -> None:
    from helm_python import HelmRenderError

    with pytest.raises(HelmRenderError, match=r"environment.registry needs environment.dockerHost"):
        helm_render({"environment": {"registry": "registry.example.com/flower"}})
    docs = rendered({"environment": {"registry": "registry.example.com/flower", "dockerHost": "tcp://127.0.0.1:2375"}})
    env = env_of(container(docs), "flower")
    assert "FLOWER_K8S_REGISTRY_AUTH" not in env and "FLOWER_K8S_ENVIRONMENT_PULL_SECRETS" not in env
    assert env["FLOWER_K8S_RUNTIME_SIZE"] == "2Gi"


# -- NetworkPolicies: matched against the pods the backend really creates ---------------------------------------
def run_pod_labels(tmp_path, claim: str) -> dict[str, str]:
    """The labels of a run's pod as KubernetesBackend.start creates it (job_manifest is pure: no git needed)."""
    data = tmp_path / "data"
    layout = RunLayout(data / "runs", "20250501-100000-abcd1234", "acme")
    job = job_manifest(layout, RunSpec(layout.run_id, "acme", "an ask"), image="flower/sandbox:0.1.0",
                       namespace="flower", claim=claim, data_dir=data, objects=data / "repos" / "acme" / ".git" / "objects",
                       secret_name="flower-run-env-0", uid=10001, gid=10001,
                       labels={"flower.service": "0123456789abcdef"})
    return job["spec"]["template"]["metadata"]["labels"]


DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def dns_rule(v: dict) -> dict:
    return {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": v["dns"]["namespace"]}},
                    "podSelector": {"matchLabels": v["dns"]["podLabels"]}}], "ports": DNS_PORTS}


@pytest.mark.parametrize("values", [{}, HARDENED], ids=["defaults", "hardened"])
def test_runs_reach_only_the_gateway_and_dns(values, tmp_path) -> None:
    docs = rendered(values)
    v = merged(values)
    policy = docs["NetworkPolicy/flower-runs"]["spec"]
    service_pod = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    test_pod = docs["Pod"]["metadata"]["labels"]
    claim = claim_of(docs)
    run_pod = run_pod_labels(tmp_path, claim)
    assert run_pod["flower.claim"] == label_value(claim)  # hashed for the hardened set's long claim name
    assert selects(policy["podSelector"], run_pod)
    assert not selects(policy["podSelector"], run_pod_labels(tmp_path, "another-release-data"))
    assert not selects(policy["podSelector"], service_pod) and not selects(policy["podSelector"], test_pod)
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["ingress"] == []

    gateway, dns, *extra = policy["egress"]
    port = v["gateway"]["port"]
    assert gateway["ports"] == [{"protocol": "TCP", "port": port}]
    (peer,) = gateway["to"]
    assert set(peer) == {"podSelector"}  # this namespace's service pod, no ipBlock, no other namespace
    assert selects(peer["podSelector"], service_pod) and not selects(peer["podSelector"], test_pod)
    assert not selects(peer["podSelector"], run_pod)
    c = container(docs)
    assert {"name": "gateway", "containerPort": port, "protocol": "TCP"} in c["ports"]
    service_ports = docs["Service"]["spec"]["ports"]
    assert {"name": "gateway", "port": port, "targetPort": "gateway", "protocol": "TCP"} in service_ports
    assert dns == dns_rule(v)
    assert extra == v["runs"]["networkPolicy"]["extraEgress"]


@pytest.mark.parametrize("values", [{}, HARDENED], ids=["defaults", "hardened"])
def test_the_service_pod_talks_to_dns_the_api_and_the_model_only(values, tmp_path) -> None:
    docs = rendered(values)
    v = merged(values)
    np = v["service"]["networkPolicy"]
    policy = docs["NetworkPolicy/flower-service"]["spec"]
    service_pod = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    test_pod = docs["Pod"]["metadata"]["labels"]
    assert selects(policy["podSelector"], service_pod) and not selects(policy["podSelector"], test_pod)
    assert policy["policyTypes"] == ["Ingress", "Egress"]

    api, gateway = policy["ingress"]
    assert api["ports"] == [{"protocol": "TCP", "port": 8080}]
    if np["apiFrom"]:
        *given, test = api["from"]
        assert given == np["apiFrom"] and selects(test["podSelector"], test_pod)  # `helm test` still gets in
    else:
        assert "from" not in api  # anyone may call the API
    (runs,) = gateway["from"]
    assert selects(runs["podSelector"], run_pod_labels(tmp_path, claim_of(docs)))
    assert not selects(runs["podSelector"], test_pod) and not selects(runs["podSelector"], service_pod)
    assert gateway["ports"] == [{"protocol": "TCP", "port": v["gateway"]["port"]}]

    dns, kube, model = policy["egress"]
    assert dns == dns_rule(v)
    assert kube["ports"] == [{"protocol": "TCP", "port": p} for p in np["kubernetesApi"]["ports"]]
    assert model["ports"] == [{"protocol": "TCP", "port": np["modelUpstream"]["port"]}]
    for rule, cidrs in ((kube, np["kubernetesApi"]["cidrs"]), (model, np["modelUpstream"]["cidrs"])):
        if cidrs:
            assert rule["to"] == [{"ipBlock": {"cidr": c}} for c in cidrs]
        else:
            assert "to" not in rule  # any address, on those ports only


def test_the_service_pod_reaches_the_registry_only_through_the_rules_given_with_it() -> None:
    """The engine that pushes and runs setup lives in the service's pod: environment.egress opens its way out, and
    only with a registry set."""
    rule = {"to": [{"ipBlock": {"cidr": "10.20.0.7/32"}}], "ports": [{"protocol": "TCP", "port": 5000}]}
    environment = {"registry": "10.20.0.7:5000/flower", "dockerHost": "tcp://127.0.0.1:2375", "egress": [rule]}
    egress = rendered({"environment": environment})["NetworkPolicy/flower-service"]["spec"]["egress"]
    assert egress[-1] == rule and len(egress) == 4
    without = rendered({"environment": {**environment, "registry": ""}})["NetworkPolicy/flower-service"]
    assert rule not in without["spec"]["egress"] and len(without["spec"]["egress"]) == 3


def test_prometheus_scrapes_by_annotation_or_a_service_monitor_behind_a_value() -> None:
    docs = rendered()
    pod = docs["Deployment"]["spec"]["template"]
    notes = pod["metadata"]["annotations"]
    (port,) = [p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "http"]
    assert (notes["prometheus.io/scrape"], notes["prometheus.io/path"]) == ("true", "/metrics")
    assert notes["prometheus.io/port"] == str(port)
    assert "ServiceMonitor" not in docs, "no ServiceMonitor unless asked (its CRD may not exist)"

    off = rendered({"metrics": {"annotations": False}})
    assert not any(k.startswith("prometheus.io/")
                   for k in off["Deployment"]["spec"]["template"]["metadata"]["annotations"])

    docs = rendered({"metrics": {"serviceMonitor": {"enabled": True, "interval": "15s",
                                                    "labels": {"release": "prometheus"}}}},
                    release="team-a", namespace="agents")
    monitor = docs["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["namespace"] == "agents"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["agents"]}
    service = docs["Service"]
    assert selects(monitor["spec"]["selector"], service["metadata"]["labels"]), "the monitor selects the chart's Service"
    assert "http" in [p["name"] for p in service["spec"]["ports"]]


def test_the_alert_rules_come_as_a_prometheusrule_only_when_asked_and_pass_promtool(tmp_path) -> None:
    import os
    import shutil
    import subprocess

    from _k8s_checks import check_names

    assert "PrometheusRule" not in rendered(), "no PrometheusRule unless asked (its CRD may not exist)"
    docs = rendered({"metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}}}},
                    release="team-a", namespace="agents")
    rule = docs["PrometheusRule"]
    check_names(rule)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["namespace"] == "agents"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "alerts.yaml").read_text()), "the file, as it is"
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert {"FlowerRunsFailing", "FlowerBudgetStops", "FlowerQueueWaitHigh", "FlowerDiskLow", "FlowerBackendDown",
            "FlowerRefusingRuns"} <= alerts, alerts
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("FLOWER_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("FLOWER_REQUIRE_PROMETHEUS=1 but promtool is not installed (apt-get install prometheus)")
        pytest.skip("no promtool (apt-get install prometheus)")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    out = subprocess.run([promtool, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True)
    assert out.returncode == 0 and f"SUCCESS: {len(alerts) + 2} rules found" in out.stdout, out.stdout + out.stderr

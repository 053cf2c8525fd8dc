"""The chart with two or more replicas on PostgreSQL: RollingUpdate behind a PodDisruptionBudget, the registry's URL
from an existing Secret, migrations once per upgrade in a hook Job, the gateway as a Deployment of its own with its
Service and NetworkPolicy — and the single-replica SQLite path as it was. Rendered by Helm's own library, strict lint,
schema-valid, every document valid Kubernetes (as in test_k8s_chart.py)."""

from __future__ import annotations

import shutil
import tomllib

import pytest
from _k8s_checks import CHART, HARDENED, chart, documents, helm_render, selects, validate
from helm_python import HelmValuesError
from helm_python.chart import Chart, lint
from helm_python.errors import HelmRenderError
from test_k8s_chart import dns_rule, run_pod_labels

from service.config import load_config

REPLICAS = {"replicas": 3, "database": {"existingSecret": "flower-db"}, "gateway": {"separate": True}}
# The same on the hardened set, with the database's addresses and another key.
REPLICAS_HARDENED = {**HARDENED, "replicas": 2, "gateway": {**HARDENED["gateway"], "separate": True},
                     "persistence": {**HARDENED["persistence"], "accessMode": "ReadWriteMany"},
                     "database": {"existingSecret": "pg-url", "key": "dsn", "cidrs": ["10.30.0.0/24"], "port": 6432}}
SETS = {"replicas": (REPLICAS, "flower", "flower"), "replicas-hardened": (REPLICAS_HARDENED, "team-a", "agents")}
URL = "postgresql://flower:not-a-password@db.internal/flower"


def named(values: dict, release: str = "flower", namespace: str = "flower") -> dict[str, dict]:
    out: dict[str, dict] = {}
    for d in documents(helm_render(values, release=release, namespace=namespace)):
        key = f"{d['kind']}/{d['metadata']['name']}"
        assert key not in out, f"two {key} documents"
        out[key] = d
    return out


def env_of(c: dict, *, pod: str, namespace: str, secret: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet gives it: the downward API and the Secret's keys resolved."""
    out = {}
    for e in c["env"]:
        ref = e.get("valueFrom")
        if ref is None:
            out[e["name"]] = e["value"]
        elif "fieldRef" in ref:
            out[e["name"]] = {"metadata.namespace": namespace, "metadata.name": pod}[ref["fieldRef"]["fieldPath"]]
        else:
            out[e["name"]] = secret[f"{ref['secretKeyRef']['name']}/{ref['secretKeyRef']['key']}"]
    return out


def pod_of(doc: dict) -> dict:
    return doc["spec"]["template"]


@pytest.mark.parametrize("name", SETS)
def test_every_document_is_valid_kubernetes_and_lint_strict_is_clean(name) -> None:
    values, release, namespace = SETS[name]
    docs = named(values, release, namespace)
    for doc in docs.values():
        validate(doc)
        assert doc["metadata"]["namespace"] == namespace
    assert {"Deployment/" + release, f"Deployment/{release}-gateway", f"Service/{release}-gateway",
            f"NetworkPolicy/{release}-gateway", f"Job/{release}-migrate",
            f"PodDisruptionBudget/{release}"} <= set(docs)
    assert not any(k.startswith("Secret/") for k in docs)
    for kube in ("v1.27.0", "v1.33.0"):
        report = lint(CHART, values, strict=True, kube_version=kube, namespace=namespace)
        assert report["messages"] == [] and report["errors"] == [], report


@pytest.mark.parametrize("name", SETS)
def test_the_api_pods_roll_one_at_a_time_behind_a_budget_each_named_by_its_pod(name) -> None:
    values, release, namespace = SETS[name]
    docs = named(values, release, namespace)
    v = chart().merge_values(values)
    dep = docs[f"Deployment/{release}"]
    assert dep["spec"]["replicas"] == v["replicas"] and type(dep["spec"]["replicas"]) is int
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pdb = docs[f"PodDisruptionBudget/{release}"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]
    assert not selects(pdb["spec"]["selector"], pod_of(docs[f"Deployment/{release}-gateway"])["metadata"]["labels"])

    (c,) = pod_of(dep)["spec"]["containers"]
    secret = {f"{v['database']['existingSecret']}/{v['database']['key']}": URL}
    env = env_of(c, pod=f"{release}-7d9f-abcde", namespace=namespace, secret=secret)
    assert env["FLOWER_SERVICE_DATABASE_URL"] == URL
    assert env["FLOWER_SERVICE_REPLICA"] == f"{release}-7d9f-abcde"  # each replica its own lease owner
    assert env["FLOWER_SERVICE_GATEWAY_PROCESS"] == "external"
    gateway_url = f"http://{release}-gateway.{namespace}.svc:{v['gateway']['port']}"
    assert env["FLOWER_SERVICE_GATEWAY_URL"] == gateway_url
    assert [p["name"] for p in c["ports"]] == ["http"]  # the API pods serve no gateway
    assert [p["name"] for p in docs[f"Service/{release}"]["spec"]["ports"]] == ["http"]


@pytest.mark.parametrize("name", SETS)
def test_the_config_and_environment_load_as_service_config_for_api_and_gateway(name, tmp_path) -> None:
    values, release, namespace = SETS[name]
    docs = named(values, release, namespace)
    v = chart().merge_values(values)
    toml = docs[f"ConfigMap/{release}-config"]["data"]["service.toml"]
    gateway_url = f"http://{release}-gateway.{namespace}.svc:{v['gateway']['port']}"
    assert tomllib.loads(toml)["gateway_url"] == gateway_url  # runs' pods call the gateway's Service
    (tmp_path / "service.toml").write_text(toml)
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("")
    secret = {f"{v['database']['existingSecret']}/{v['database']['key']}": URL}
    for dep in (f"Deployment/{release}", f"Deployment/{release}-gateway"):
        (c,) = pod_of(docs[dep])["spec"]["containers"]
        env = env_of(c, pod="p", namespace=namespace, secret=secret)
        env.pop("FLOWER_SERVICE_CONFIG")
        cfg = load_config(tmp_path / "service.toml", env=env, tenants=str(tenants), data_dir=str(tmp_path / "d"))
        assert cfg.database_url == URL and cfg.backend == "kubernetes" and cfg.gateway_url == gateway_url
        assert cfg.gateway_port == v["gateway"]["port"] and cfg.warm == 0  # warm pools are per replica


@pytest.mark.parametrize("name", SETS)
def test_migrations_run_once_per_upgrade_in_a_hook_job_from_the_secret(name, tmp_path) -> None:
    values, release, namespace = SETS[name]
    docs = named(values, release, namespace)
    v = chart().merge_values(values)
    job = docs[f"Job/{release}-migrate"]
    notes = job["metadata"]["annotations"]
    assert notes["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert notes["helm.sh/hook-delete-policy"] == "before-hook-creation"
    assert 0 < job["spec"]["backoffLimit"] <= 3 and job["spec"]["activeDeadlineSeconds"]
    pod = pod_of(job)["spec"]
    assert pod["restartPolicy"] == "Never"
    # a pre-install hook runs before the release's ServiceAccount and ConfigMap exist: it needs neither
    assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False
    assert not any("configMap" in vol for vol in pod["volumes"])
    api = pod_of(docs[f"Deployment/{release}"])["spec"]
    assert pod["securityContext"] == api["securityContext"]
    (c,) = pod["containers"]
    assert c["command"] == ["python", "-m", "service", "migrate"]
    assert c["image"] == api["containers"][0]["image"]
    assert c["securityContext"] == api["containers"][0]["securityContext"]
    (ref,) = [e["valueFrom"]["secretKeyRef"] for e in c["env"] if e["name"] == "FLOWER_SERVICE_DATABASE_URL"]
    assert ref == {"name": v["database"]["existingSecret"], "key": v["database"]["key"]}
    volumes = {vol["name"]: vol for vol in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert "emptyDir" in volumes["data"] and mounts["data"] == v["dataDir"]  # a throwaway data dir, not the claim
    assert volumes["tenants"]["secret"]["secretName"] == v["tenants"]["secretName"]

    # its environment alone is a config `python -m service migrate` loads, with the Secret's URL in it
    env = env_of(c, pod="p", namespace=namespace, secret={f"{ref['name']}/{ref['key']}": URL})
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("")
    assert env["FLOWER_SERVICE_TENANTS"].startswith(mounts["tenants"] + "/")
    env.update(FLOWER_SERVICE_TENANTS=str(tenants), FLOWER_SERVICE_DATA_DIR=str(tmp_path / "data"))
    cfg = load_config(env=env)
    assert cfg.database_url == URL


@pytest.mark.parametrize("name", SETS)
def test_the_gateway_deployment_its_service_and_its_policy(name, tmp_path) -> None:
    values, release, namespace = SETS[name]
    docs = named(values, release, namespace)
    v = chart().merge_values(values)
    port = v["gateway"]["port"]
    api = docs[f"Deployment/{release}"]
    gw = docs[f"Deployment/{release}-gateway"]
    api_pod, gw_pod = pod_of(api)["metadata"]["labels"], pod_of(gw)["metadata"]["labels"]
    (claim,) = [vol["persistentVolumeClaim"]["claimName"] for vol in pod_of(api)["spec"]["volumes"]
                if vol["name"] == "data"]
    run_pod = run_pod_labels(tmp_path, claim)
    # one gateway per data dir: one pod, the old one gone before the new one takes the lock
    assert gw["spec"]["replicas"] == 1 and gw["spec"]["strategy"] == {"type": "Recreate"}
    assert selects(gw["spec"]["selector"], gw_pod) and not selects(gw["spec"]["selector"], api_pod)
    assert not selects(api["spec"]["selector"], gw_pod)
    (c,) = pod_of(gw)["spec"]["containers"]
    assert c["command"] == ["python", "-m", "service", "gateway"]
    assert c["ports"] == [{"name": "gateway", "containerPort": port, "protocol": "TCP"}]
    assert pod_of(gw)["spec"]["automountServiceAccountToken"] is False  # it calls no Kubernetes API
    assert pod_of(gw)["spec"]["securityContext"] == pod_of(api)["spec"]["securityContext"]
    assert c["securityContext"] == pod_of(api)["spec"]["containers"][0]["securityContext"]
    gw_vols = {vol["name"]: vol for vol in pod_of(gw)["spec"]["volumes"]}
    api_vols = {vol["name"]: vol for vol in pod_of(api)["spec"]["volumes"]}
    for shared in ("config", "tenants", "credentials", "data"):  # the same config, credentials and data dir
        assert gw_vols[shared] == api_vols[shared], shared

    svc = docs[f"Service/{release}-gateway"]
    assert selects({"matchLabels": svc["spec"]["selector"]}, gw_pod)
    assert not selects({"matchLabels": svc["spec"]["selector"]}, api_pod)
    assert svc["spec"]["ports"] == [{"name": "gateway", "port": port, "targetPort": "gateway", "protocol": "TCP"}]

    policy = docs[f"NetworkPolicy/{release}-gateway"]["spec"]
    assert selects(policy["podSelector"], gw_pod) and not selects(policy["podSelector"], api_pod)
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": port}]
    runs_peer, api_peer = ingress["from"]
    assert selects(runs_peer["podSelector"], run_pod) and not selects(runs_peer["podSelector"], api_pod)
    assert selects(api_peer["podSelector"], api_pod) and not selects(api_peer["podSelector"], run_pod)
    assert not any(selects(p["podSelector"], run_pod_labels(tmp_path, "another-release-data"))
                   for p in ingress["from"])
    dns, model, database = policy["egress"]
    np = v["service"]["networkPolicy"]
    assert dns == dns_rule(v)
    assert model["ports"] == [{"protocol": "TCP", "port": np["modelUpstream"]["port"]}]
    assert model.get("to", []) == [{"ipBlock": {"cidr": c}} for c in np["modelUpstream"]["cidrs"]]
    assert database["ports"] == [{"protocol": "TCP", "port": v["database"]["port"]}]
    assert database.get("to", []) == [{"ipBlock": {"cidr": c}} for c in v["database"]["cidrs"]]

    # runs reach the gateway's pod, no longer the API's; the API's policy lets no run in and reaches the database
    runs = docs[f"NetworkPolicy/{release}-runs"]["spec"]
    (peer,) = runs["egress"][0]["to"]
    assert runs["egress"][0]["ports"] == [{"protocol": "TCP", "port": port}]
    assert selects(peer["podSelector"], gw_pod) and not selects(peer["podSelector"], api_pod)
    service = docs[f"NetworkPolicy/{release}-service"]["spec"]
    (api_in,) = service["ingress"]
    assert api_in["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert service["egress"][-1] == database


BAD = [
    ({"replicas": 2}, "at '/database/existingSecret'"),
    ({"replicas": 2, "database": {"existingSecret": "flower-db"}, "gateway": {"separate": True},
      "persistence": {"accessMode": "ReadWriteOnce"}}, "at '/persistence/accessMode'"),
    ({"replicas": 2, "database": {"existingSecret": "flower-db"}}, "at '/gateway/separate'"),
    ({"replicas": 0}, "at '/replicas'"),
    ({"database": {"existingSecret": "Not A Name"}}, "at '/database/existingSecret'"),
]


@pytest.mark.parametrize("values,message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_the_schema_refuses_replicas_without_what_they_need(values, message) -> None:
    with pytest.raises(HelmValuesError) as e:
        helm_render(values)
    assert message in str(e.value)
    assert lint(CHART, values, strict=True)["errors"]


SENTENCES = [
    ({"replicas": 2}, "replicas: 2 needs database.existingSecret (a Secret holding the registry's postgresql:// "
                      "URL): the SQLite registry on the data volume serves one replica only"),
    ({"replicas": 2, "database": {"existingSecret": "flower-db"}, "gateway": {"separate": True},
      "persistence": {"accessMode": "ReadWriteOnce"}},
     "replicas: 2 needs persistence.accessMode ReadWriteMany: the replicas read each other's run folders"),
    ({"replicas": 4, "database": {"existingSecret": "flower-db"}},
     "replicas: 4 needs gateway.separate: true: one gateway serves a data dir"),
]


@pytest.mark.parametrize("values,sentence", SENTENCES, ids=[str(i) for i in range(len(SENTENCES))])
def test_the_templates_refuse_them_too_with_a_sentence(values, sentence, tmp_path) -> None:
    """Rendered without its schema (e.g. --skip-schema-validation), the chart still stops, saying why."""
    copy = tmp_path / "flower"
    shutil.copytree(CHART, copy)
    (copy / "values.schema.json").unlink()
    with pytest.raises(HelmRenderError) as e:
        Chart.load(copy).render(values, name="flower", namespace="flower")
    assert sentence in str(e.value)


def test_the_default_single_replica_sqlite_path_is_as_it_was() -> None:
    docs = named({})
    dep = docs["Deployment/flower"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert not [k for k in docs if k.split("/")[0] in ("Job", "PodDisruptionBudget")]
    assert "Deployment/flower-gateway" not in docs and "Service/flower-gateway" not in docs
    (c,) = pod_of(dep)["spec"]["containers"]
    names = {e["name"] for e in c["env"]}
    assert not names & {"FLOWER_SERVICE_DATABASE_URL", "FLOWER_SERVICE_REPLICA", "FLOWER_SERVICE_GATEWAY_PROCESS",
                        "FLOWER_SERVICE_GATEWAY_URL"}
    assert [p["name"] for p in c["ports"]] == ["http", "gateway"]
    assert tomllib.loads(docs["ConfigMap/flower-config"]["data"]["service.toml"])["gateway_url"] == \
        "http://flower.flower.svc:8081"
    assert len(docs["NetworkPolicy/flower-service"]["spec"]["egress"]) == 3  # no database rule


def test_one_replica_on_postgresql_migrates_in_the_hook_and_keeps_recreate() -> None:
    docs = named({"database": {"existingSecret": "flower-db"}})
    dep = docs["Deployment/flower"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert "Job/flower-migrate" in docs and "PodDisruptionBudget/flower" not in docs
    (c,) = pod_of(dep)["spec"]["containers"]
    names = {e["name"] for e in c["env"]}
    assert "FLOWER_SERVICE_DATABASE_URL" in names and "FLOWER_SERVICE_REPLICA" not in names
    for doc in docs.values():
        validate(doc)
    assert lint(CHART, {"database": {"existingSecret": "flower-db"}}, strict=True)["messages"] == []


def test_the_notes_name_the_database_secret_only_when_there_is_one() -> None:
    text = helm_render(REPLICAS_HARDENED, release="team-a", namespace="agents")["flower/templates/NOTES.txt"]
    assert "kubectl -n agents create secret generic pg-url --from-literal=dsn='postgresql://…'" in text
    assert "PostgreSQL" not in helm_render()["flower/templates/NOTES.txt"]

"""The Kubernetes backend proves BASE of the conformance suite against its recorded API, served from state
(``_k8s_cluster.RecordedCluster``): every call it makes on the way is allowed by the chart's Role. Nothing runs in
a pod here, so the harness plays the run's side (its first event, its question): this shows the backend drives
the API as documented through a run's whole life, not that a cluster runs the pod."""

from __future__ import annotations

from pathlib import Path

from _k8s_api import permission_of
from _k8s_cluster import RecordedCluster

from sandbox.backends.kubernetes import API_PERMISSIONS, KubeAPI, KubernetesBackend
from sandbox.conformance import Capability, Harness, run_backend_conformance
from sandbox.testing import play

NS = "flower"


def test_the_kubernetes_backend_conforms_to_base_against_its_recorded_api(data_dir: Path, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("token-one\n")
    with RecordedCluster(NS) as cluster:
        def make() -> KubernetesBackend:
            return KubernetesBackend(KubeAPI(cluster.url, token_file=token), image="flower/sandbox:0.1.0",
                                     namespace=NS, claim="flower-data", data_dir=data_dir,
                                     labels={"flower.service": "0123456789abcdef"}, uid=10001, gid=10001, poll_s=0.01)

        report = run_backend_conformance(Harness(make, repo=data_dir / "repos" / "acme", root=data_dir / "runs",
                                                 play=play, how="against its recorded API; the harness plays the pod"))
    assert report.shown == {Capability.BASE}, report
    assert not cluster.unexpected, [f"{r.method} {r.path}" for r in cluster.unexpected]
    assert not cluster.jobs, "every Job was removed"
    for req in cluster.requests:
        group, resource, verb = permission_of(req, NS)
        assert verb in API_PERMISSIONS.get((group, resource), ()), f"{req.method} {req.path} needs {verb} {resource}"

"""The Kubernetes backend's Job and Secret, built by pure functions and validated offline (no cluster here)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from _k8s_checks import validate

from sandbox.backends.base import BackendError
from sandbox.backends.kubernetes import (ENV_IN_CONTAINER, job_manifest, job_name, label_value,
                                         secret_manifest)
from sandbox.layout import RunLayout
from sandbox.spec import RunSpec
from sandbox.worktree import objects_dir


def build(layout: RunLayout, spec: RunSpec, data_dir: Path, **kw) -> dict:
    args = dict(image="flower/sandbox:0.1.0", namespace="flower", claim="flower-data", data_dir=data_dir,
                objects=objects_dir(layout.dir.parent.parent / "repos" / "acme"), secret_name="flower-run-env-0a1b2c3d", uid=10001,
                gid=10001, labels={"flower.service": "0123456789abcdef"})
    args.update(kw)
    return job_manifest(layout, spec, **args)


def mounts(job: dict) -> dict[str, dict]:
    return {m["mountPath"]: m for m in job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}


def test_the_job_of_a_run_is_valid_and_says_what_the_design_says(prepared, data_dir: Path) -> None:
    layout, spec = prepared
    job = build(layout, spec, data_dir, cpu="2", memory="4Gi", deadline_s=3600, ttl_s=600,
                image_pull_secrets=["regcred"])
    validate(job)
    assert job["metadata"]["name"] == job_name(layout)
    assert job["spec"]["backoffLimit"] == 0
    labels = job["metadata"]["labels"]
    assert labels["flower.run"] == layout.run_id and labels["flower.tenant"] == "acme"
    assert labels["flower.service"] == "0123456789abcdef" and labels["flower.claim"] == "flower-data"
    assert job["metadata"]["annotations"] == {"flower.run": layout.run_id, "flower.tenant": "acme",
                                              "flower.dir": str(layout.dir)}
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["template"]["metadata"]["labels"]["flower.job"] == job["metadata"]["name"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["fsGroup"] == 10001  # what makes the 0400 Secret file readable by the run
    (c,) = pod["containers"]
    assert c["command"] == ["python", "-m", "sandbox.entrypoint", str(layout.spec_file)]
    assert c["workingDir"] == str(layout.workspace)
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                                    "seccompProfile": {"type": "RuntimeDefault"}}
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["FLOWER_ENV"] == ENV_IN_CONTAINER and env["HOME"] == str(layout.home)
    assert env["FLOWER_RUN_ID"] == layout.run_id and env["FLOWER_EXTRA"] == "1"
    assert not any("sk-test" in v for v in env.values())  # credentials never travel in the Job
    m = mounts(job)
    run_sub = f"runs/{layout.run_id}"
    assert str(layout.dir) not in m, "the run folder itself is never the run's"
    for d in layout.writable:
        assert m[str(d)] == {"name": "data", "mountPath": str(d), "subPath": f"{run_sub}/{d.name}"}
    objects = str(data_dir / "repos" / "acme" / ".git" / "objects")
    assert m[objects] == {"name": "data", "mountPath": objects, "subPath": "repos/acme/.git/objects", "readOnly": True}
    assert str(layout.spec_file) not in m, "the spec is in the mailbox, mounted once"
    assert m[str(layout.mailbox)]["subPath"] == f"{run_sub}/mailbox" and m[str(layout.mailbox)]["readOnly"]
    assert m["/run/flower"]["name"] == "env" and str(layout.env_file) not in m
    assert pod["volumes"][-1] == {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "flower-data"}
    assert volumes["env"]["secret"] == {"secretName": "flower-run-env-0a1b2c3d", "defaultMode": 0o400,
                                        "items": [{"key": "flower.env", "path": "flower.env"}]}
    assert job["spec"]["activeDeadlineSeconds"] == 3600 and job["spec"]["ttlSecondsAfterFinished"] == 600
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def test_the_minimal_job_is_valid_too(prepared, data_dir: Path) -> None:
    layout, spec = prepared
    job = build(layout, spec, data_dir, labels=None)
    validate(job)
    assert "resources" not in job["spec"]["template"]["spec"]["containers"][0]
    assert "activeDeadlineSeconds" not in job["spec"] and "ttlSecondsAfterFinished" not in job["spec"]


def test_the_env_secret_is_valid_immutable_and_owned_by_the_job(prepared) -> None:
    layout, _ = prepared
    raw = layout.env_file.read_bytes()
    owner = {"metadata": {"name": job_name(layout), "uid": "6f1c2b9e-3d7a-4c51-9a0e-2b8f4d6e1a37"}}
    secret = secret_manifest(f"{job_name(layout)}-env-0a1b2c3d", "flower", raw, labels={"flower.run": "x"},
                             owner=owner)
    validate(secret)
    assert secret["immutable"] is True and secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["flower.env"]) == raw
    assert secret["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job",
                                                     "name": job_name(layout), "uid": owner["metadata"]["uid"]}]


def test_long_ids_and_odd_tenants_still_make_valid_names_and_labels(data_dir: Path) -> None:
    repo = data_dir / "repos" / "acme"
    from sandbox.worktree import make_workspace

    run_id = "a" * 62 + "-"  # 63 characters, ending in '-': a valid run id, not a valid label value
    layout = RunLayout(data_dir / "runs", run_id, "acme").ensure()
    make_workspace(repo, layout.workspace, layout.branch)
    spec = RunSpec(run_id, "team_b-", "ask")
    job = build(layout, spec, data_dir)
    validate(job)  # names ≤ 63, every label value valid
    assert len(job["metadata"]["name"]) <= 63
    assert job["metadata"]["labels"]["flower.run"].startswith("h-")
    assert job["metadata"]["annotations"]["flower.run"] == run_id  # the exact id is kept
    assert job["metadata"]["annotations"]["flower.tenant"] == "team_b-"
    assert label_value("acme") == "acme" and label_value("x" * 64).startswith("h-")


def test_a_repository_outside_the_data_volume_is_refused(prepared, data_dir: Path, tmp_path: Path) -> None:
    layout, spec = prepared
    with pytest.raises(BackendError, match="not under the data volume"):
        build(layout, spec, data_dir, objects=tmp_path / "elsewhere" / ".git" / "objects")
    with pytest.raises(BackendError, match="not under the data volume"):
        build(layout, spec, tmp_path / "other-volume")

"""KubernetesBackend: one ``batch/v1`` Job per run, spoken to over plain HTTP (stdlib ``urllib``).

For teams that outgrow one machine. The service runs in the cluster (the Helm chart in ``helm/``) with its
``data_dir`` on a PersistentVolumeClaim; every run is a Job in the service's namespace whose pod mounts the
same claim, so paths mean the same thing in the service and in the run (as with the Docker backend):

* read-write, each at its own path: the run's checkout, workbench, ``run/``, ``home/`` and ``outbox/``
  (``RunLayout.writable``, as ``subPath``s of the claim) — never the run folder itself;
* read-only: ``mailbox/`` (the spec in it), and the team's object store the checkout borrows
  (``spec.objects``, ``subPath: <its path under data_dir>``): the tenants' repositories must therefore live
  on the claim too (e.g. ``<data_dir>/repos/<tenant>``);
* the env file from a per-run Secret (created here, owned by the Job so Kubernetes deletes it with the Job,
  ``immutable``) at ``/run/flower/flower.env`` (``FLOWER_ENV``), mode 0400 (0440 in practice: the pod's
  ``fsGroup`` is added so the non-root run can read it); the service's own copy, ``mailbox/flower.env`` (0600),
  holds the same run token and nothing more;
* ``/tmp`` an ``emptyDir``; the root file system read-only; every capability dropped; no privilege escalation;
  ``RuntimeDefault`` seccomp; no service-account token (a run never talks to the Kubernetes API).

A run in its team's environment (``spec.environment``, prepared by ``sandbox.prepare`` on the Docker engine the
service has): the prepared image is pushed once to ``registry`` (the service's ``environment_registry``) and the
run's container is that image by digest, started through flower's runtime, which an initContainer of the sandbox
image copies into an ``emptyDir`` mounted read-only at ``sandbox.runtime.RUNTIME`` — where the Docker backend
mounts its runtime volume (``runtime_pod``). Without a registry such a run is refused with a sentence naming
``environment_registry``.

The pod runs as the service's own uid:gid (as with Docker's ``user="auto"``): the run and the service
exchange files both ways on the claim. Never as root: ``runAsNonRoot`` always, and a backend whose uid is 0 (a
service running as root) refuses to start a run. ``backoffLimit: 0``: a failed run is not retried by Kubernetes (flower
resumes a re-submitted run through its lineage file instead).

Labels: ``flower.run``, ``flower.tenant``, ``flower.claim`` (the claim's name: two services never adopt each
other's runs), ``flower.job`` (on the pod, to find it) plus the backend's ``labels`` (the service adds its
``flower.service`` scope, as for Docker). A value that is not a valid label value becomes ``h-<hash>``; the
exact run id, tenant and run folder are always in the annotations of the same names.

A handle is the Job's name. ``stop`` deletes the Job's pod with ``gracePeriodSeconds=<timeout>`` (SIGTERM,
then SIGKILL), which fails the Job (``backoffLimit: 0``); a Job with no pod yet, or one still active
``stop_margin_s`` (15) after the grace period, is deleted outright. ``remove`` deletes the Job with
``propagationPolicy=Background`` (its pod and Secret follow). No cluster is reachable where this was written:
it is checked against the Kubernetes API reference's shapes by a recorded-contract test, not a real cluster.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ..layout import RunLayout
from ..runtime import FILL, RUNTIME
from ..runtime import argv as runtime_argv
from ..spec import Prepared, RunSpec
from .base import (ENV_IN_CONTAINER, BackendError, BackendUnavailable, Handle, RunExists, State, check_prepared,
                   read_exit, run_env, stopped_exit)

__all__ = ["KubernetesBackend", "KubeAPI", "job_manifest", "secret_manifest", "job_name", "label_value",
           "API_PERMISSIONS", "ENV_IN_CONTAINER", "SERVICE_ACCOUNT_DIR", "NO_REGISTRY"]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
CONTAINER = "run"
RUNTIME_CONTAINER = "runtime"
ENV_KEY = "flower.env"
NO_REGISTRY = ("a team's own environment on Kubernetes needs a registry the cluster pulls from: set "
               "`environment_registry` in the service config (the chart's `environment.registry`), where flower "
               "pushes each prepared environment")

# Exactly what this backend asks of the API: the chart's Role grants these and nothing else
# (tests/kubernetes checks both the Role and every recorded request against this table).
API_PERMISSIONS: dict[tuple[str, str], frozenset[str]] = {
    ("batch", "jobs"): frozenset({"create", "get", "list", "delete"}),
    ("", "pods"): frozenset({"get", "list", "delete"}),
    ("", "pods/log"): frozenset({"get"}),
    ("", "secrets"): frozenset({"create"}),
}

_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def label_value(value: str) -> str:
    """``value`` if Kubernetes accepts it as a label value, else ``h-<16 hex of its sha256>``."""
    if _LABEL_VALUE.fullmatch(value):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:16]


def job_name(layout: RunLayout) -> str:
    """``flower-<run_id, at most 45>-<8 hex of the run folder>``: a DNS label (≤ 63), one Job per run folder."""
    digest = hashlib.sha256(str(layout.dir).encode()).hexdigest()[:8]
    return f"flower-{layout.run_id[:45]}-{digest}"


def _under(path: Path, root: Path, what: str) -> str:
    """``path`` relative to the claim's mount point, as a subPath; BackendError if it is not on the claim."""
    try:
        rel = Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:
        raise BackendError(f"{what} {path} is not under the data volume {root}: a run's pod only sees that "
                           "volume, so keep runs and tenant repositories under data_dir (e.g. data_dir/repos/<tenant>)"
                           ) from None
    if str(rel) in ("", "."):
        raise BackendError(f"{what} {path} is the data volume itself; it must be a folder inside it")
    return rel.as_posix()


def job_manifest(layout: RunLayout, spec: RunSpec, *, image: str, namespace: str, claim: str,
                 data_dir: str | Path, objects: str | Path | None, secret_name: str, uid: int, gid: int,
                 labels: dict[str, str] | None = None, cpu: str | None = None, memory: str | None = None,
                 grace_s: int = 10, deadline_s: int | None = None, ttl_s: int | None = None,
                 image_pull_secrets: list[str] | None = None, name: str | None = None,
                 tmp_size: str = "256Mi", environment_image: str | None = None,
                 runtime_size: str = "2Gi") -> dict[str, Any]:
    """The ``batch/v1`` Job of one run (pure: no I/O beyond resolving paths). See the module doc for the mounts.
    A run in its team's environment (``spec.environment``) runs ``environment_image`` — the prepared image as
    pushed to the registry — with flower's runtime copied out of ``image`` by an initContainer (``runtime_pod``).
    BackendError for ``uid`` 0: a run's pod is never root."""
    if uid == 0:
        raise BackendError("a run's pod would run as uid 0 (root): run the service as an unprivileged uid, as the "
                           "chart's securityContext does, or give KubernetesBackend the uid= and gid= of one")
    if spec.environment is not None and not environment_image:
        raise BackendError(NO_REGISTRY)
    name = name or job_name(layout)
    run_path = _under(layout.dir, Path(data_dir), "the run folder")
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": str(d), "subPath": f"{run_path}/{d.name}"} for d in layout.writable]
    mounts.append({"name": "data", "mountPath": str(layout.mailbox), "subPath": f"{run_path}/mailbox",
                   "readOnly": True})
    if objects is not None:
        mounts.append({"name": "data", "mountPath": str(Path(objects)), "readOnly": True,
                       "subPath": _under(Path(objects), Path(data_dir), "the repository's object store")})
    meta_labels = {**(labels or {}), "flower.run": label_value(layout.run_id), "flower.tenant": label_value(spec.tenant),
                   "flower.claim": label_value(claim), "app.kubernetes.io/managed-by": "flower"}
    pod_labels = {**meta_labels, "flower.job": name}
    annotations = {"flower.run": layout.run_id, "flower.tenant": spec.tenant, "flower.dir": str(layout.dir)}
    env = run_env(layout, spec, ENV_IN_CONTAINER)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "sandbox.entrypoint", str(layout.spec_file)],
        "workingDir": str(layout.workspace),
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [
            *mounts,
            {"name": "env", "mountPath": str(Path(ENV_IN_CONTAINER).parent), "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    limits = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    if limits:
        container["resources"] = {"limits": limits, "requests": dict(limits)}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": int(grace_s),
        "securityContext": {"runAsUser": uid, "runAsGroup": gid, "fsGroup": gid,
                            "fsGroupChangePolicy": "OnRootMismatch", "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
            {"name": "env", "secret": {"secretName": secret_name, "defaultMode": 0o400,
                                       "items": [{"key": ENV_KEY, "path": ENV_KEY}]}},
            {"name": "tmp", "emptyDir": {"sizeLimit": tmp_size}},
        ],
    }
    if spec.environment is not None and environment_image:
        runtime_pod(pod, spec.environment, environment_image, runtime_image=image, spec_file=str(layout.spec_file),
                    size=runtime_size)
    if image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in dict.fromkeys(image_pull_secrets)]
    job_spec: dict[str, Any] = {"backoffLimit": 0, "template": {"metadata": {"labels": pod_labels,
                                                                              "annotations": annotations},
                                                                 "spec": pod}}
    if deadline_s:
        job_spec["activeDeadlineSeconds"] = int(deadline_s)
    if ttl_s is not None:
        job_spec["ttlSecondsAfterFinished"] = int(ttl_s)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": meta_labels, "annotations": annotations},
            "spec": job_spec}


def runtime_pod(pod: dict[str, Any], environment: Prepared, image: str, *, runtime_image: str, spec_file: str,
                size: str) -> None:
    """Turn a run's pod into one of its team's environment, as the Docker backend runs it: ``image`` (the prepared
    environment, pushed) with the image's variables under the run's own, started through flower's runtime
    (``sandbox.runtime.argv``: no ENTRYPOINT or CMD of the team's) — the runtime copied by an initContainer of
    flower's ``runtime_image`` (``sandbox.runtime.FILL``, the very script that fills Docker's runtime volume) into
    an emptyDir of at most ``size``, mounted read-only at ``RUNTIME`` in the run's container.

    The copy runs as root with CAP_CHOWN alone (``cp -a`` keeps owners and modes: ``/etc/shadow`` stays
    unreadable to the run), no privilege escalation, a read-only root: flower's own image and a fixed script, no
    team code. The run's uid:gid stays the pod's (the service's: they share files on the claim), so a
    devcontainer's ``remoteUser`` is not taken — as with the Docker backend under a non-root service."""
    (run,) = pod["containers"]
    run["image"] = image
    run["command"] = runtime_argv("sandbox.entrypoint", spec_file)
    names = {e["name"] for e in run["env"]}
    run["env"] = [*({"name": k, "value": v} for k, v in environment.env.items() if k not in names), *run["env"]]
    run["volumeMounts"].append({"name": "runtime", "mountPath": RUNTIME, "readOnly": True})
    copy: dict[str, Any] = {
        "name": RUNTIME_CONTAINER,
        "image": runtime_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", FILL],
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": "runtime", "mountPath": RUNTIME}],
    }
    if "resources" in run:
        copy["resources"] = run["resources"]
    pod["initContainers"] = [copy]
    pod["volumes"].append({"name": "runtime", "emptyDir": {"sizeLimit": size}})


def secret_manifest(name: str, namespace: str, env_file: bytes, *, labels: dict[str, str] | None = None,
                    owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's env file as an immutable Opaque Secret (key ``flower.env``); ``owner`` is the Job it dies with."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": True, "metadata": meta,
            "data": {ENV_KEY: base64.b64encode(env_file).decode("ascii")}}


def _finished(job: dict[str, Any], ends: tuple[str, ...] = ("Complete", "Failed")) -> bool:
    """The Job has one of the condition types ``ends`` (``("Complete",)``: it succeeded)."""
    return any(c.get("type") in ends and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


class KubeAPI:
    """The few Kubernetes API calls the backend needs, over plain HTTPS (stdlib only).

    ``token_file`` is re-read on every request (projected service-account tokens rotate); ``token`` is fixed.
    """

    def __init__(self, base_url: str, *, token: str | None = None, token_file: str | Path | None = None,
                 ca_file: str | Path | None = None, timeout: float = 15) -> None:
        self.base_url = base_url.rstrip("/")
        self.token, self.token_file, self.timeout = token, Path(token_file) if token_file else None, timeout
        self._ssl = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None

    @classmethod
    def in_cluster(cls, sa_dir: str | Path = SERVICE_ACCOUNT_DIR, env: dict[str, str] | None = None) -> "KubeAPI":
        env = dict(os.environ if env is None else env)
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
        sa = Path(sa_dir)
        if not host or not (sa / "token").is_file():
            raise BackendError("the Kubernetes backend runs inside a cluster (KUBERNETES_SERVICE_HOST and a "
                               f"service-account token in {sa}); outside one, give KubeAPI a base URL and token")
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token_file=sa / "token", ca_file=sa / "ca.crt")

    def _bearer(self) -> str | None:
        if self.token_file is not None:
            try:
                return self.token_file.read_text(encoding="utf-8").strip()
            except OSError as e:
                raise BackendError(f"cannot read the Kubernetes token {self.token_file}: {e.strerror or e}") from None
        return self.token

    def call(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
             missing_ok: bool = False, raw: bool = False) -> Any:
        """JSON (or text with ``raw``) of a 2xx answer; None for a 404 when ``missing_ok``; else BackendError."""
        url = self.base_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "text/plain" if raw else "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._ssl) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as e:
            if e.code == 404 and missing_ok:
                return None
            if e.code in (502, 503, 504):  # the API server is restarting, or a proxy in front of it cannot reach it
                raise BackendUnavailable(f"the Kubernetes API at {self.base_url} cannot serve {method} {path} now "
                                         f"({e.code}); runs are not failed while it is away") from e
            raise _api_error(method, path, e.code, e.read()) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise BackendUnavailable(f"the Kubernetes API at {self.base_url} did not answer {method} {path} "
                                     f"({reason}); check the service's network and KUBERNETES_SERVICE_HOST") from e
        if raw:
            return payload.decode("utf-8", "replace")
        return json.loads(payload) if payload else {}


class ApiStatusError(BackendError):
    def __init__(self, message: str, code: int, reason: str) -> None:
        super().__init__(message)
        self.code, self.reason = code, reason


def _api_error(method: str, path: str, code: int, payload: bytes) -> ApiStatusError:
    try:
        status = json.loads(payload)
        message, reason = str(status.get("message") or ""), str(status.get("reason") or "")
    except ValueError:
        message, reason = payload.decode("utf-8", "replace")[:300], ""
    hint = {401: "the service's token was refused: check its ServiceAccount",
            403: "the service's Role does not allow it: install the chart's Role/RoleBinding (helm/templates/rbac.yaml)",
            409: "it already exists"}.get(code, "see the message")
    return ApiStatusError(f"Kubernetes refused {method} {path} with {code} {reason}: {message} ({hint})", code, reason)


class KubernetesBackend:
    """Runs the sandbox image as one Job per run; see the module doc for what the pod sees.

    ``data_dir`` is where the claim ``claim`` is mounted in the service's own pod (the service's ``data_dir``).
    ``uid``/``gid`` default to the service's own. ``labels`` go on every Job and pod; ``live()`` only sees Jobs
    carrying them (and this claim's label).

    A team's own environment (``spec.environment``) needs ``registry`` (``host[:port]/path``) and ``client``, the
    Docker engine that prepared it (``sandbox.prepare``): ``start`` pushes the prepared image there once
    (``registry_auth``: a Docker config.json to log in with) and the pod pulls it by digest, with
    ``environment_pull_secrets`` added to its imagePullSecrets. Without a registry ``client`` is None: the service
    then refuses such runs before any setup, naming ``environment_registry``.
    """

    def __init__(self, api: KubeAPI, *, image: str, namespace: str, claim: str, data_dir: str | Path,
                 labels: dict[str, str] | None = None, uid: int | None = None, gid: int | None = None,
                 cpu: str | None = None, memory: str | None = None, grace_s: int = 10,
                 deadline_s: int | None = None, ttl_s: int | None = None,
                 image_pull_secrets: list[str] | None = None, poll_s: float = 0.5, stop_margin_s: float = 15,
                 registry: str | None = None, client: Any = None, registry_auth: str | Path | None = None,
                 environment_pull_secrets: list[str] | None = None, runtime_size: str = "2Gi") -> None:
        self.api, self.image, self.namespace, self.claim = api, image, namespace, claim
        self.registry = registry or None
        self.client = client if self.registry else None
        self.registry_auth = Path(registry_auth) if registry_auth else None
        self.environment_pull_secrets = list(environment_pull_secrets or [])
        self.runtime_size = runtime_size
        self._pushed: dict[tuple[str, str], str] = {}  # (prepared image id, tenant) → the reference a pod pulls
        self.data_dir = Path(data_dir)
        self.labels = {k: label_value(v) for k, v in (labels or {}).items()}
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.cpu, self.memory, self.grace_s, self.deadline_s, self.ttl_s = cpu, memory, grace_s, deadline_s, ttl_s
        self.image_pull_secrets = list(image_pull_secrets or [])
        self.poll_s, self.stop_margin_s = poll_s, stop_margin_s

    @classmethod
    def from_environment(cls, image: str, *, data_dir: str | Path, labels: dict[str, str] | None = None,
                         env: dict[str, str] | None = None, sa_dir: str | Path = SERVICE_ACCOUNT_DIR,
                         api: KubeAPI | None = None, registry: str | None = None,
                         client: Any = None) -> "KubernetesBackend":
        """In the cluster, as the chart sets it up: ``FLOWER_K8S_CLAIM`` (required), ``FLOWER_K8S_NAMESPACE``
        (else the service account's), ``FLOWER_K8S_RUN_CPU``, ``FLOWER_K8S_RUN_MEMORY``,
        ``FLOWER_K8S_RUN_DEADLINE_S``, ``FLOWER_K8S_RUN_TTL_S``, ``FLOWER_K8S_IMAGE_PULL_SECRETS`` (comma-separated).
        With ``registry`` (the service's ``environment_registry``): the Docker engine ``docker.from_env`` finds
        (``DOCKER_HOST``); and, with or without it, ``FLOWER_K8S_REGISTRY_AUTH`` (the push login's config.json),
        ``FLOWER_K8S_ENVIRONMENT_PULL_SECRETS`` (comma-separated) and ``FLOWER_K8S_RUNTIME_SIZE`` (the runtime's
        emptyDir)."""
        env = dict(os.environ if env is None else env)
        claim = env.get("FLOWER_K8S_CLAIM", "")
        if not claim:
            raise BackendError("backend 'kubernetes' needs FLOWER_K8S_CLAIM, the PersistentVolumeClaim mounted at "
                               "data_dir (the Helm chart sets it)")
        namespace = env.get("FLOWER_K8S_NAMESPACE", "")
        if not namespace:
            try:
                namespace = (Path(sa_dir) / "namespace").read_text(encoding="utf-8").strip()
            except OSError:
                raise BackendError("backend 'kubernetes' needs FLOWER_K8S_NAMESPACE (or a service-account "
                                   "namespace file): the namespace runs go in") from None

        def number(key: str) -> int | None:
            raw = env.get(key, "")
            if not raw:
                return None
            try:
                return int(raw)
            except ValueError:
                raise BackendError(f"{key}={raw!r} is not a whole number of seconds") from None

        def names(key: str) -> list[str]:
            return [s.strip() for s in env.get(key, "").split(",") if s.strip()]

        if registry and client is None:
            import docker

            from .docker import engine_errors

            with engine_errors("connect to the engine that prepares environments"):
                client = docker.from_env(environment=env)
        return cls(api or KubeAPI.in_cluster(sa_dir, env), image=image, namespace=namespace, claim=claim,
                   data_dir=data_dir, labels=labels, cpu=env.get("FLOWER_K8S_RUN_CPU") or None,
                   memory=env.get("FLOWER_K8S_RUN_MEMORY") or None, deadline_s=number("FLOWER_K8S_RUN_DEADLINE_S"),
                   ttl_s=number("FLOWER_K8S_RUN_TTL_S"), image_pull_secrets=names("FLOWER_K8S_IMAGE_PULL_SECRETS"),
                   registry=registry, client=client, registry_auth=env.get("FLOWER_K8S_REGISTRY_AUTH") or None,
                   environment_pull_secrets=names("FLOWER_K8S_ENVIRONMENT_PULL_SECRETS"),
                   runtime_size=env.get("FLOWER_K8S_RUNTIME_SIZE") or "2Gi")

    # -- paths of the API -------------------------------------------------------------------
    def _jobs(self, name: str = "") -> str:
        return f"/apis/batch/v1/namespaces/{self.namespace}/jobs" + (f"/{name}" if name else "")

    def _core(self, kind: str, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/{kind}" + (f"/{name}" if name else "")

    # -- the protocol ------------------------------------------------------------------------
    def start(self, layout: RunLayout, spec: RunSpec, *, network: str | None = None) -> Handle:
        if network is not None:
            raise BackendError("the Kubernetes backend does not take a network name: isolate runs with the "
                               "chart's NetworkPolicy, and pass network=None")
        objects = check_prepared(layout, spec)
        environment_image, pull = None, self.image_pull_secrets
        if spec.environment is not None:  # before anything is made: a refusal leaves nothing behind
            environment_image = self.publish(spec.environment, spec.tenant)
            pull = [*pull, *self.environment_pull_secrets]
        layout.ensure()
        layout.exit_file.unlink(missing_ok=True)
        name = job_name(layout)
        secret_name = f"{name}-env-{secrets.token_hex(4)}"
        manifest = job_manifest(layout, spec, image=self.image, namespace=self.namespace, claim=self.claim,
                                data_dir=self.data_dir, objects=objects, secret_name=secret_name, uid=self.uid,
                                gid=self.gid, labels=self.labels, cpu=self.cpu, memory=self.memory,
                                grace_s=self.grace_s, deadline_s=self.deadline_s, ttl_s=self.ttl_s,
                                image_pull_secrets=pull, name=name, environment_image=environment_image,
                                runtime_size=self.runtime_size)
        env_bytes = layout.env_file.read_bytes()
        job = self._create_job(manifest, layout.run_id)
        try:
            self.api.call("POST", self._core("secrets"), body=secret_manifest(
                secret_name, self.namespace, env_bytes, labels=manifest["metadata"]["labels"], owner=job))
        except BackendError as e:
            try:
                self.remove(Handle(name))
                undone = "so its Job was deleted"
            except BackendError:
                undone = f"and its Job {name} could not be deleted either (delete it by hand)"
            kind = BackendUnavailable if isinstance(e, BackendUnavailable) else BackendError
            raise kind(f"could not give run {layout.run_id} its credentials Secret, {undone}: {e}") from e
        return Handle(name)

    def publish(self, environment: Prepared, tenant: str) -> str:
        """Blocking: the reference a pod pulls ``environment`` by — pushed to the registry the first time this
        backend meets that prepared image (``sandbox.prepare.push``), then remembered. BackendError naming
        ``environment_registry`` when there is none."""
        if self.registry is None or self.client is None:
            raise BackendError(NO_REGISTRY)
        from ..prepare import push
        from .docker import engine_errors

        with engine_errors("push the prepared environment"):
            key = (str(self.client.images.get(environment.image).id), tenant)
            if key not in self._pushed:
                self._pushed[key] = push(environment, tenant=tenant, registry=self.registry, client=self.client,
                                         auth_file=self.registry_auth)
        return self._pushed[key]

    def _create_job(self, manifest: dict[str, Any], run_id: str) -> dict[str, Any]:
        """POST the Job; a leftover Job of the same run folder is deleted first unless it still runs."""
        name = manifest["metadata"]["name"]
        for attempt in range(2):
            try:
                created: dict[str, Any] = self.api.call("POST", self._jobs(), body=manifest)
                return created
            except ApiStatusError as e:
                if e.code != 409 or attempt:
                    raise BackendError(f"Kubernetes could not start run {run_id}: {e}") from None
            old = self.api.call("GET", self._jobs(name), missing_ok=True)
            if old is not None and not _finished(old):
                raise RunExists(f"run {run_id} is already running as Job {name}")
            self.remove(Handle(name))
        raise AssertionError("unreachable")

    def state(self, handle: Handle) -> State:
        job = self._job(handle)
        if job is None:
            return "missing"
        return "exited" if _finished(job) else "running"

    def exit_code(self, handle: Handle) -> int | None:
        job = self._job(handle)
        if job is None or not _finished(job):
            return None
        for pod in self._pods(handle):
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                term = (cs.get("state") or {}).get("terminated")
                if cs.get("name") == CONTAINER and term and isinstance(term.get("exitCode"), int):
                    return int(term["exitCode"])
        folder = (job.get("metadata", {}).get("annotations") or {}).get("flower.dir")
        data = read_exit(Path(folder)) if folder else None
        code = data.get("exit_code") if data else None
        if isinstance(code, int):
            return code
        return 0 if _finished(job, ("Complete",)) else None

    def stop(self, handle: Handle, timeout: float = 10) -> None:
        job = self._job(handle)
        if job is None:
            return
        folder = (job.get("metadata", {}).get("annotations") or {}).get("flower.dir")
        if not _finished(job):
            grace = max(0, int(round(timeout)))
            pods = self._pods(handle)
            for pod in pods:
                self.api.call("DELETE", self._core("pods", pod["metadata"]["name"]),
                              query={"gracePeriodSeconds": grace}, missing_ok=True)
            deadline = time.monotonic() + grace + self.stop_margin_s
            while pods and time.monotonic() < deadline:
                current = self._job(handle)
                if current is None or _finished(current):
                    break
                time.sleep(self.poll_s)
            else:  # no pod yet (nothing to signal), or the Job outlived its pod: the Job itself goes
                self.remove(handle)
        if folder:
            stopped_exit(Path(folder), timeout)

    def live(self) -> dict[str, Handle]:
        selector = ",".join(["flower.run", *(f"{k}={v}" for k, v in
                                             {**self.labels, "flower.claim": label_value(self.claim)}.items())])
        listing = self.api.call("GET", self._jobs(), query={"labelSelector": selector})
        out: dict[str, Handle] = {}
        for job in listing.get("items") or []:
            if _finished(job):
                continue
            meta = job.get("metadata") or {}
            run_id = (meta.get("annotations") or {}).get("flower.run") or (meta.get("labels") or {}).get("flower.run")
            if run_id:
                out[run_id] = Handle(meta["name"])
        return out

    def remove(self, handle: Handle) -> None:
        self.api.call("DELETE", self._jobs(handle), query={"propagationPolicy": "Background"}, missing_ok=True)

    # -- extras --------------------------------------------------------------------------------
    def mail_owner(self) -> tuple[int, int] | None:
        """None: a run's pod runs as the service's own uid:gid, so it reads what the service writes."""
        return None

    def logs(self, handle: Handle) -> str:
        """What the run's pod printed (empty when the pod is gone)."""
        out = []
        for pod in self._pods(handle):
            text = self.api.call("GET", self._core("pods", pod["metadata"]["name"]) + "/log",
                                 query={"container": CONTAINER}, missing_ok=True, raw=True)
            out.append(text or "")
        return "".join(out)

    def wait(self, handle: Handle, timeout: float | None = None) -> int | None:
        """Poll until the Job finishes (or ``timeout``); its exit code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.state(handle) == "running":
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(self.poll_s)
        return self.exit_code(handle)

    # -- internals -----------------------------------------------------------------------------
    def _job(self, name: str) -> dict[str, Any] | None:
        job: dict[str, Any] | None = self.api.call("GET", self._jobs(name), missing_ok=True)
        return job

    def _pods(self, name: str) -> list[dict[str, Any]]:
        listing = self.api.call("GET", self._core("pods"), query={"labelSelector": f"flower.job={name}"})
        return list(listing.get("items") or [])

"""ServiceConfig: where the service keeps its data, who its tenants are, how runs are sandboxed.

Read from a TOML or JSON file (``$FLOWER_SERVICE_CONFIG`` or an explicit path), then
overridden field by field by ``FLOWER_SERVICE_<FIELD>`` environment variables (e.g.
``FLOWER_SERVICE_MAX_RUNNING=8``). Relative paths in the file are relative to the file.
Anything wrong raises ``ServiceConfigError`` with one sentence saying what and where.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from .errors import ServiceConfigError
from .fields import explain

__all__ = ["ServiceConfig", "ServiceConfigError", "load_config", "config_of_json", "CONFIG_ENV", "ENV_PREFIX"]

CONFIG_ENV = "FLOWER_SERVICE_CONFIG"
ENV_PREFIX = "FLOWER_SERVICE_"
REGISTRY = r"^$|^[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$"  # host[:port][/path], as Docker names one


class ServiceConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    data_dir: str
    """Registry database, run folders (worktrees, workbenches, run dirs, mailboxes) live here."""
    tenants: str
    """Path of the tenants file (TOML or JSON)."""
    database_url: str | None = None
    """``postgresql://user:password@host/db``: the registry in PostgreSQL (several replicas may share it); unset,
    it is the SQLite file ``registry.sqlite3`` in data_dir. The password never appears in a log, /healthz or an
    error (``service.registry.dialects.describe``)."""
    backend: Literal["local", "docker", "kubernetes"] = "docker"
    image: str = ""  # docker: empty = build (or reuse) this tree's image locally; kubernetes: required
    network_mode: str | None = None
    max_running: Annotated[int, msgspec.Meta(ge=1)] = 4
    """Runs executing at once across all tenants; each tenant's quota applies on top."""
    max_resumes: Annotated[int, msgspec.Meta(ge=0, le=100)] = 3
    """How many times a run whose sandbox was lost (killed, OOM, its engine restarted, its pod evicted) is resumed
    in a new sandbox on its own folder; the next loss fails it with every cause listed. 0: never resumed."""
    resume_backoff_s: Annotated[float, msgspec.Meta(ge=0, le=600)] = 2.0
    """The wait before the first resume; it doubles with each loss (at most 5 minutes)."""
    setup_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 1800.0
    """How long a team's setup commands may take (``sandbox.prepare``) before the run fails with their tail."""
    environment_cache_gb: Annotated[float, msgspec.Meta(gt=0)] = 20.0
    """Prepared environments kept, at most (the engine's sizes); the least recently used go first."""
    environment_registry: Annotated[str, msgspec.Meta(pattern=REGISTRY)] = ""
    """kubernetes: where each prepared environment is pushed for the cluster to pull (``host[:port]/path``, e.g.
    ``registry.example.com/flower``); empty: a tenant that asks for its own environment is refused there."""
    warm: Annotated[int, msgspec.Meta(ge=0, le=64)] = 0
    """Sandboxes kept started ahead for each tenant's repository, runner imported and waiting with nothing of any
    run in it (``sandbox.pool``): a run claims one and skips most of its start. docker and local backends."""
    poll_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 0.25
    """How often the scheduler looks at queued runs, events and exits."""
    replica: str = ""
    """This replica's name in the registry's leases (``Registry.take``); empty: the host's name. One live process
    per name (``service.control.leases``): a second one started under it refuses to start, so replicas sharing a host need
    one each. The name is free at once after a graceful stop or its holder's death on this host, else once its
    heartbeat ran out (``lease_s``); a replica started again under it then takes its runs back at once, another
    replica once their lease expires."""
    lease_s: Annotated[float, msgspec.Meta(ge=1, le=300)] = 20.0
    """How long a live run stays with a replica that stopped renewing its lease (renewed every quarter of it):
    after it, another replica takes the run and re-attaches to its sandbox."""
    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8080
    log_format: Literal["json", "console", "auto"] = "auto"
    """"auto": key=value lines on a terminal, JSON lines otherwise (a pipe, a file, a log shipper)."""
    log_level: str = "INFO"
    min_free_mb: Annotated[float, msgspec.Meta(ge=0)] = 512
    """Free space the data dir keeps: below it submits get 507, queued runs wait, /healthz says degraded."""
    remove_worktree: bool = True
    """Remove a finished run's checkout (its branch ``flower/<run>`` keeps the work it handed back)."""
    # -- what a run may use (Docker; the chart sets the same for Kubernetes) ----------------------
    run_user: Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,9}:[0-9]{1,9}$")] = "10001:10001"
    run_memory: str = "2g"
    """Memory limit of one run's container (swap included); empty for none."""
    run_cpus: Annotated[float, msgspec.Meta(ge=0, le=256)] = 1.0
    run_pids: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 512
    run_tmp_size: str = "256m"
    max_bundle_mb: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1024
    """The largest work bundle taken from a run."""
    max_run_disk_mb: Annotated[float, msgspec.Meta(ge=0, le=10_000_000)] = 10_240
    """Disk one run's folder may use (measured every 10 s; past it the run is stopped and fails); 0 for no limit."""
    retain_days: Annotated[float, msgspec.Meta(ge=0, le=36_500)] = 0
    """Remove the files of runs that ended this many days ago (rows and branches stay); 0 keeps them forever."""
    # -- the local backend -----------------------------------------------------------------------
    local_isolation: Literal["auto", "bwrap", "none"] = "auto"
    """"auto": bubblewrap when installed, else none (then only one tenant, unless unsafe_shared_local)."""
    unsafe_shared_local: bool = False
    """Serve several tenants with the local backend and no isolation: every run sees every tenant's files."""
    # -- the model gateway (service/gateway/) -----------------------------------------------------
    gateway_process: Literal["inside", "beside", "external"] = "beside"
    """Where the gateway runs: "beside" (``python -m service`` starts ``python -m service gateway`` as a process
    of its own, which outlives it, and starts it again within a second if it dies), "external" (the operator runs
    ``python -m service gateway`` itself: Helm's own Deployment), "inside" (in the API's process: a restart of the
    API stalls every run's model calls)."""
    gateway_host: str = "0.0.0.0"
    gateway_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] | None = None
    """Also serve the gateway on TCP (Kubernetes runs reach it there); Docker and local runs use a unix socket."""
    gateway_url: str = ""
    """The gateway's URL as Kubernetes runs see it, e.g. ``http://flower:8081`` (the chart sets it)."""
    prices: dict[str, tuple[float, float]] = {}
    """USD per million (input, output) tokens by model-name fragment, ahead of the built-in table."""
    guard_canary: bool = True
    """Prove at start, through the bundled CLI, that the guards hold (``flower check --guards``); refuse runs if not."""
    guard_canary_cli: str = ""
    """The CLI the canary proves, when not the SDK's bundled one (the same path local runs would use)."""
    # -- egress by allow-list (service/egress/) ------------------------------------------------------
    egress_presets: dict[str, list[str | dict[str, Any]]] = {}
    """Named allow-lists a tenant's ``egress`` may name (``[egress_presets]`` in the file), over the built-in
    ``package-registries`` (``service.egress.rules.PACKAGE_REGISTRIES``: the public npm, PyPI, Debian, crates, Go
    proxy and Maven hosts); a preset of the same name replaces it."""
    egress_internal: list[str] = []
    """Internal address ranges (CIDRs) an allow-listed host may resolve to; by default none: a listed name that
    resolves to loopback, a private or a link-local address is refused (e.g. ``["10.1.2.0/24"]`` for a mirror on
    the company network)."""
    egress_max_upload_mb: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 64
    """What one run may send out through its allow-list in all (request bodies, tunnels included); past it its
    connections are cut."""
    egress_hosts_file: str = "/etc/hosts"
    """The hosts file squid reads before it asks DNS (a name pinned to an address for every allow-list)."""
    egress_squid: str = "/usr/sbin/squid"
    """The squid binary that enforces the allow-lists (Debian's ``squid``); needed only when a tenant has one."""

    def presets(self) -> dict[str, tuple[object, ...]]:
        """The allow-lists a tenant may name: the built-in ones, then the config's."""
        from .egress.rules import DEFAULT_PRESETS

        return {**DEFAULT_PRESETS, **{name: tuple(entries) for name, entries in self.egress_presets.items()}}

    # -- results reaching the team (service/results/) -------------------------
    webhook_retry_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 15.0
    """A failed webhook delivery is tried again this much later, then twice that, … (5 tries in all)."""
    webhook_slots: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 16
    """Webhook tries a replica has in flight at once, all tenants together (each ends within 10 s)."""
    webhook_tenant_slots: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 4
    """… of them one tenant's at most: a tenant whose receiver hangs holds up only its own webhooks."""
    # -- schedules and triggers (service/control/schedules.py) ----------------------------------------
    schedule_min_interval_s: Annotated[float, msgspec.Meta(ge=1, le=31 * 24 * 3600)] = 300.0
    """The shortest time between two ticks of a tenant's schedule (a cron firing more often is refused); a tenant's
    ``schedule_min_interval_s`` in the tenants file overrides it."""
    trigger_per_minute: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 3
    """Runs one trigger may start per minute, across replicas; a fire past it is a 429 and starts nothing."""
    # -- the API ----------------------------------------------------------------------------------
    max_streams_per_tenant: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 16
    """Open SSE streams one tenant may hold at once (429 past that)."""
    requests_per_s: Annotated[float, msgspec.Meta(gt=0, le=100_000)] = 50.0
    """``/v1`` requests one tenant may make per second to one replica, on average (a token bucket in the replica's
    memory: N replicas serve a tenant N times this); past it a 429 with ``Retry-After``. A tenant's
    ``requests_per_s`` in the tenants file overrides it."""
    request_burst: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 500
    """Requests one tenant may make at once before ``requests_per_s`` paces it (the bucket's size); a tenant's
    ``request_burst`` overrides it."""
    max_queued_per_tenant: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 500
    """Runs one tenant may have waiting to start, across replicas; a submit past it is a 429 and queues nothing. A
    tenant's ``max_queued`` overrides it."""
    metrics_token_file: str = ""
    """A file holding the scrape token of ``GET /metrics``: a scrape with ``Authorization: Bearer <it>`` sees the
    per-tenant series; any other sees the same metrics summed over tenants, no tenant's name in them (a wrong token
    is a 401). Empty: every scrape gets the summed view."""
    otlp_endpoint: str = ""
    """Where OpenTelemetry traces of runs go over OTLP/HTTP, e.g. ``http://127.0.0.1:4318`` (``/v1/traces`` is added
    when no path is given); empty: no traces, and OpenTelemetry is not even imported (``service.tracing``)."""
    trace_link: str = ""
    """A run's trace in the operator's tracing UI: a URL where ``{trace_id}`` stands for the trace's id (for Arize
    Phoenix, ``http://phoenix:6006/projects/<project id>/traces/{trace_id}``); the API's ``trace_url`` and the page's
    link to the trace. Empty: the page shows the id as text."""
    max_diff_mb: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 20
    """The largest diff ``GET /v1/runs/{id}/diff`` sends (whole or one file's); past it a 422 says to fetch the
    branch. A small bundle can hold a huge diff: the service streams it and never holds more than a MB of it."""

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)

    @property
    def db_path(self) -> Path:
        return self.data_path / "registry.sqlite3"

    @property
    def runs_root(self) -> Path:
        return self.data_path / "runs"


def _read_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ServiceConfigError(f"service config {path} does not exist: create it or point {CONFIG_ENV} at the right file") from None
    except OSError as e:
        raise ServiceConfigError(f"cannot read service config {path}: {e.strerror or e}") from None
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise ServiceConfigError(f"service config {path} is not valid {kind}: {e}") from None
    if not isinstance(data, dict):
        raise ServiceConfigError(f"service config {path} must hold a table/object of settings")
    data = dict(data.get("service", data)) if isinstance(data.get("service"), dict) else data
    for key in ("data_dir", "tenants", "metrics_token_file", "egress_hosts_file"):  # relative to the file
        value = data.get(key)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            data[key] = str((path.parent / value).resolve())
    return data


def load_config(path: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None,
                **overrides: Any) -> ServiceConfig:
    """File (``path`` or ``$FLOWER_SERVICE_CONFIG``, optional) ← ``FLOWER_SERVICE_*`` env ← ``overrides``."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    where = "the environment"
    chosen = path if path is not None else env.get(CONFIG_ENV) or None
    if chosen:
        p = Path(chosen).expanduser()
        data = _read_file(p)
        where = str(p)
    for name in ServiceConfig.__struct_fields__:
        value = env.get(ENV_PREFIX + name.upper())
        if value is not None and value != "":
            data[name] = value
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        cfg = msgspec.convert(data, ServiceConfig, strict=False)
    except msgspec.ValidationError as e:
        raise ServiceConfigError(f"service config from {where} is invalid: {explain(e, ServiceConfig)}") from None
    for name in ("data_dir", "tenants", "metrics_token_file"):
        if getattr(cfg, name):
            setattr(cfg, name, str(Path(getattr(cfg, name)).expanduser().resolve()))
    if not Path(cfg.tenants).is_file():
        raise ServiceConfigError(f"tenants file {cfg.tenants} does not exist: create it (see service/tenants.py) "
                          f"or set `tenants` in {where}")
    _check_egress(cfg, where)
    _check_otlp(cfg.otlp_endpoint, where)
    _check_trace_link(cfg, where)
    if cfg.database_url and not cfg.database_url.startswith(("postgresql://", "postgresql+psycopg://",
                                                             "postgres://")):
        scheme = cfg.database_url.split(":", 1)[0]
        raise ServiceConfigError(f"database_url in {where} must be a postgresql:// URL (it starts with {scheme!r}); "
                                 "leave it unset for the SQLite registry in data_dir")
    if cfg.backend == "kubernetes" and not cfg.image:
        raise ServiceConfigError("backend 'kubernetes' needs an `image` the cluster can pull: push the Dockerfile's "
                          "`sandbox` target and name it")
    if cfg.backend == "kubernetes" and cfg.warm:
        raise ServiceConfigError("`warm` is for the docker and local backends: on Kubernetes keep warm capacity in the "
                          "cluster instead (see helm/README.md, 'Warm starts')")
    if cfg.backend == "kubernetes" and not (cfg.gateway_url and cfg.gateway_port is not None):
        raise ServiceConfigError("backend 'kubernetes' needs `gateway_port` (where the service serves the model gateway) "
                          "and `gateway_url` (how run pods reach it, e.g. http://flower:8081)")
    return cfg


def _check_egress(cfg: ServiceConfig, where: str) -> None:
    """Each preset parses (its bad entry named) and each internal range is one."""
    import ipaddress

    from .egress.rules import RuleError, parse_rules

    for name, entries in cfg.egress_presets.items():
        if name in ("none", "closed", "open"):
            raise ServiceConfigError(f"egress preset {name!r} in {where} has the name of an egress mode; pick another")
        try:
            parse_rules(entries, {})
        except RuleError as e:
            raise ServiceConfigError(f"egress preset {name!r} in {where}: {e}") from None
    for cidr in cfg.egress_internal:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ServiceConfigError(f"`egress_internal` in {where} holds {cidr!r}, which is not an address range "
                                     "such as 10.1.2.0/24") from None


def _check_trace_link(cfg: ServiceConfig, where: str) -> None:
    from urllib.parse import urlsplit

    link = cfg.trace_link
    if not link:
        return
    if not cfg.otlp_endpoint:
        raise ServiceConfigError(f"`trace_link` in {where} links traces, but no trace is sent: set `otlp_endpoint` "
                                 "too, or leave `trace_link` empty")
    if "{trace_id}" not in link or urlsplit(link).scheme not in ("http", "https"):
        raise ServiceConfigError(f"`trace_link` in {where} is {link!r}: it must be an http:// or https:// URL "
                                 "holding {trace_id}, e.g. http://127.0.0.1:6006/projects/UHJvamVjdDox/traces/"
                                 "{trace_id}")


def _check_otlp(endpoint: str, where: str) -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        parts = None
    if endpoint and (parts is None or parts.scheme not in ("http", "https") or not parts.hostname):
        raise ServiceConfigError(f"`otlp_endpoint` in {where} is {endpoint!r}, which is not an http:// or https:// URL "
                                 "such as http://127.0.0.1:4318; leave it empty for no traces")


def config_of_json(data: bytes) -> ServiceConfig:
    """A config another process of the service resolved and passed on (``msgspec.json.encode`` of it): how the
    service hands its gateway process the very config it runs with."""
    try:
        return msgspec.json.decode(data, type=ServiceConfig)
    except msgspec.ValidationError as e:  # (a DecodeError too: caught first)
        raise ServiceConfigError(f"the service config passed on stdin is invalid: {e}") from None
    except msgspec.DecodeError as e:
        raise ServiceConfigError(f"the service config passed on stdin is not JSON: {e}") from None

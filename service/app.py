"""The service's app: the REST API (``service/api/``), its OpenAPI document and docs page, metrics, health.

Every ``/v1`` route needs ``Authorization: Bearer <tenant token>`` (401 otherwise) and only
ever sees the caller's own runs (another tenant's run is a 404, indistinguishable from none).
Errors are JSON ``ErrorOut`` ``{"status_code", "error", ...}`` with one sentence in ``error``; a malformed
body is a 400 naming the field, never a 500, and nothing is created or lost on bad input.
``/`` is the web page (``service/web/``).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from litestar import Litestar, Router
from litestar.datastructures import State
from litestar.di import Provide
from litestar.static_files import create_static_files_router

from flower import __version__
from sandbox.backends.base import Backend

from .api.deps import bearer_guard, dependencies
from .api.docs import docs_assets, docs_redirect, openapi_config
from .api.errors import EXCEPTION_HANDLERS
from .api.limits import RateLimits
from .api.mailbox import MailboxController
from .api.ops import healthz, security_headers
from .api.ops import metrics as metrics_handler
from .api.results import ResultsController
from .api.runs import RunController, new_run_id, usage
from .api.schedules import ScheduleController, TriggerController
from .api.schemas import MAX_BODY, AnswerIn, SubmitIn, TextIn
from .api.scrape import ScrapeToken
from .api.stream import events
from .clock import SYSTEM, Clock
from .config import ServiceConfig
from .control.canary import check
from .egress import read_counts
from .gateway.keeper import GatewayKeeper
from .logging import get_logger
from .registry import open_registry
from .tenants import Tenant, Tenants, not_ready
from .wiring import build

__all__ = ["create_app", "make_backend", "new_run_id", "SubmitIn", "AnswerIn", "TextIn"]

log = get_logger("flower.service.api")


def make_backend(config: ServiceConfig, tenants: int = 1) -> Backend:
    """The configured backend, scoped to this service's runs: a restarted service adopts its own runs only.

    The local backend walls runs in with bubblewrap; without it (not installed, or ``local_isolation="none"``)
    it serves one tenant only, unless ``unsafe_shared_local`` says the operator accepts that every run
    sees every tenant's files."""
    if config.backend == "local":
        from sandbox.backends import LocalBackend
        from sandbox.backends.local import bwrap_available

        isolation = config.local_isolation
        if isolation == "auto":
            isolation = "bwrap" if bwrap_available() else "none"
        if isolation == "none":
            if tenants > 1 and not config.unsafe_shared_local:
                raise ValueError(f"the local backend without bubblewrap cannot keep {tenants} tenants apart: install "
                                 "bubblewrap (`apt-get install bubblewrap`), use the docker backend, or set "
                                 "unsafe_shared_local = true if every tenant may read every other's files")
            log.warning("backend.unisolated", backend="local", tenants=tenants,
                        hint="runs are plain processes of the service's uid: install bubblewrap to isolate them")
        return LocalBackend(root=config.runs_root, isolation=isolation)
    scope = hashlib.sha256(str(config.runs_root).encode()).hexdigest()[:16]
    if config.backend == "kubernetes":  # in the cluster, as helm/ sets it up (FLOWER_K8S_* variables)
        from sandbox.backends.kubernetes import KubernetesBackend

        return KubernetesBackend.from_environment(config.image, data_dir=config.data_path,
                                                  labels={"flower.service": scope},
                                                  registry=config.environment_registry or None)
    from sandbox.backends import DockerBackend

    image = config.image
    if not image:  # no registry needed: the image is made from this tree, and reused while the tree is unchanged
        from sandbox.image import PROJECT, ensure_image

        if not (PROJECT / "Dockerfile").is_file():
            raise ValueError("the docker backend needs the run image: set `image = \"flower/sandbox:<tag>\"` in the "
                             "service config (an installed service has no Dockerfile to build it from)")

        log.info("image.ensure", target="sandbox")
        image = ensure_image("sandbox")
    return DockerBackend(image, network_mode=config.network_mode, labels={"flower.service": scope},
                         user=config.run_user, mem_limit=config.run_memory or None, cpus=config.run_cpus or None,
                         pids_limit=config.run_pids or None, tmp_size=config.run_tmp_size)


def _announce(tenants: list[Tenant], event: str) -> None:
    """The operator hears of the tenants file at start and at each reload: how many tenants, and each that cannot run
    here (its repository, its credentials), with what is wrong and the fix — before that tenant's first submit. In a
    thread of its own: each check opens a repository."""
    log = get_logger("flower.service")

    def tell() -> None:
        broken = not_ready(tenants)
        log.info(event, tenants=len(tenants), not_ready=[name for name, _ in broken])
        for name, why in broken:
            log.warning("tenant.not_ready", tenant=name, error=why)

    threading.Thread(target=tell, name="tenants-check", daemon=True).start()


def create_app(config: ServiceConfig, *, backend: Backend | None = None, clock: Clock = SYSTEM,
               gateway_command: Sequence[str] | None = None) -> Litestar:
    """The app; the scheduler starts with it and stops with it (runs themselves keep running).
    ``clock``: the time every part reads (a test moves it on by days). ``gateway_command``: how the gateway's
    process is started when ``gateway_process`` is "beside" (default ``python -m service gateway``)."""
    state_log = get_logger("flower.service")
    tenants = Tenants(config.tenants, on_reload_error=lambda why: state_log.error("tenants.reload_failed",
                                                                                   error=why),
                      on_reload=lambda found: _announce(found, "tenants.reloaded"), presets=config.presets())
    _announce(tenants.all(), "tenants.loaded")
    config.data_path.mkdir(parents=True, exist_ok=True, mode=0o700)
    config.runs_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    registry = open_registry(config)
    if registry.migrated_from is not None:
        state_log.info("registry.migrated", registry=registry.where, found=registry.migrated_from,
                       revision=registry.revision)
    if backend is None:
        backend = make_backend(config, tenants=len(tenants.all()))
    scrape = ScrapeToken(config.metrics_token_file)  # an unreadable token file stops the start, with a sentence
    service = build(config, registry, tenants, backend, clock=clock)
    scheduler, gateway, metrics, gate = service.scheduler, service.gateway, service.metrics, service.gate

    def streams() -> dict[str, int]:  # every tenant, 0 included: a gauge that drops a series reads as no data
        open_now = service.slots.open
        return {t.name: open_now[t.name] for t in tenants.all()}

    metrics.watch(registry.runs.counts, streams)
    metrics.watch_egress(lambda: read_counts(config.data_path / "egress"))  # the gateway process's proxies
    keeper = GatewayKeeper(config, gateway_command) if config.gateway_process == "beside" else None

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        canary = None
        if config.guard_canary:
            gate.hold("the guard canary is proving the guards for this CLI; queued runs start when it passes")
            canary = asyncio.get_running_loop().create_task(check(gate, service.hooks.wake, config.guard_canary_cli),
                                                            name="flower-canary")
        if config.gateway_process == "inside" and config.gateway_port is not None:
            port = await gateway.listen_tcp(config.gateway_host, config.gateway_port)
            state_log.info("gateway.listening", host=config.gateway_host, port=port)
        if keeper is not None:  # before re-attaching: the live runs' model calls are served again at once
            await keeper.start()
        await asyncio.to_thread(service.slots.reset)  # before the API serves a stream: its last self's go
        await scheduler.start()
        service.schedules.start_loop()
        state_log.info("service.started", backend=config.backend, data_dir=config.data_dir, registry=registry.where,
                       tenants=len(tenants.all()), max_running=config.max_running)
        try:
            yield
        finally:
            if canary is not None:
                canary.cancel()
            await service.schedules.stop()
            await scheduler.stop()
            for launching in list(scheduler.starter.launching):  # a start that waits on a setup: the run stays
                launching.cancel()  # `starting`, and the next start's recovery puts it back in line
            environments = scheduler.starter.launcher.environments
            if environments is not None:  # its setups end, then their squid (runs' egress is the gateway's)
                await asyncio.to_thread(environments.close)
            if keeper is not None:
                await keeper.stop()
            await gateway.aclose()
            if service.traces is not None:  # the spans still queued, for a few seconds at most
                await asyncio.to_thread(service.traces.close)
            registry.close()
            state_log.info("service.stopped")

    v1 = Router(path="/v1", route_handlers=[RunController, MailboxController, ResultsController, ScheduleController,
                                            events, usage],
                guards=[bearer_guard(tenants, RateLimits(config, clock))], security=[{"bearer": []}])
    fired = Router(path="/v1", route_handlers=[TriggerController])  # a trigger's own token, not a tenant's
    app = Litestar(
        route_handlers=[v1, fired, healthz, metrics_handler, docs_redirect, docs_assets(),
                        # the web page: static files, no build step (service/web/)
                        create_static_files_router("/", [Path(__file__).parent / "web"], html_mode=True,
                                                   include_in_schema=False)],
        dependencies={**dependencies(service),
                      "scrape": Provide(lambda: scrape, use_cache=True, sync_to_thread=False)},
        lifespan=[lifespan],
        state=State({"config": config, "registry": registry, "tenants": tenants, "metrics": metrics,
                     "service": service}),
        exception_handlers=EXCEPTION_HANDLERS,
        before_send=[security_headers],
        request_max_body_size=MAX_BODY,
        logging_config=None,
        openapi_config=openapi_config(__version__),
    )
    app.state.gateway_keeper = keeper
    return app


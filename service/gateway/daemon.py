"""``python -m service gateway``: the model gateway as a process of its own — the data plane that outlives the
control plane.

With the gateway inside the API's process, a restart of the API (a crash, an upgrade) stalls every running agent's
model calls. Here the gateway reads what it needs from the registry and nothing else: every ``SYNC_S`` it lists
the active runs that hold a token (``Registry.active_grants``), opens a grant for each new one — the tenant's
upstream and credentials read from its credentials file, a listener on the run's ``layout.gateway`` folder on the
local and Docker backends — and closes the grants of runs that are no longer active (or whose tenant left the
tenants file). Calls are admitted and their usage metered into the registry here (``Budgets``: holds in the
registry, so two gateways on one database share a budget), and the wire audit's counts go to the
registry (``wire_audit``) for the scheduler's comparison at a run's end. A run whose tenant has an egress
allow-list gets its ``egress.sock`` beside its gateway socket here too (``service.egress``: squid is started with
the first). The scheduler stops a run over budget from its row; this side answers 403 from the moment it is over.

Started by the service beside itself it is given the service's pid (``--parent``): once that process is gone and
no run is active it ends (``ORPHAN_EXIT_S``) — a gateway with runs to serve never does.

One gateway per data dir: it holds an flock on ``data_dir/gateway.lock`` (its pid written in it) while it serves;
a second one finds the lock held, says so and exits 0. SIGTERM (or SIGINT) closes it gracefully. Beside the lock,
a datagram socket (``metering.WAKE_NAME``): a service that has just given a run its token pokes it
(``metering.poke``), and the next pass is now — a run's start waits for no pass.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import socket
import time
from pathlib import Path

from ..config import ServiceConfig
from ..control.live import layout_of, one_line
from ..egress import EgressProxy, SquidError
from ..logging import get_logger
from ..metrics import Metrics
from ..registry import Registry, Run, open_registry
from ..tenants import Tenants
from ..tracing import WireSpans, exporter_of
from .budgets import Budgets
from .grant import Grant
from .metering import SYNC_S, WAKE_NAME, grant_of  # SYNC_S: how often the active runs are read
from .server import Gateway

__all__ = ["GatewayProcess", "serve_gateway", "take_lock", "lock_path", "LOCK_NAME", "SYNC_S", "RESOLVE_S"]

LOCK_NAME = "gateway.lock"
LOCK_WAIT_S = 0.5  # a lock held a moment (another process probing it) is waited for this long
ORPHAN_EXIT_S = 2.0  # parent gone and no grant for this long: nothing left to serve
RESOLVE_S = 0.1  # Kubernetes: the registry is read for unknown tokens at most this often (``_tokens``)

log = get_logger("flower.service.gateway")


def holds_owner(config: ServiceConfig) -> str:
    """The name on the budget holds this data dir's gateway takes: one gateway serves a data dir at a time (its
    lock), so one started again lets every hold of that name go — the calls its dead self had in flight. Not the
    replica's name: any replica may be the one that starts it again."""
    return f"gateway {socket.gethostname()} {config.data_path}"


def lock_path(config: ServiceConfig) -> Path:
    return config.data_path / LOCK_NAME


def take_lock(path: Path, *, wait_s: float = LOCK_WAIT_S) -> int | None:
    """The lock's fd, held (exclusive), or None when another process holds it past ``wait_s``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


def lock_held(path: Path) -> bool:
    """Some process holds the gateway's lock (a gateway serves); never waits."""
    fd = take_lock(path, wait_s=0)
    if fd is None:
        return True
    os.close(fd)  # closing the fd lets the lock go
    return False


class GatewayProcess:
    """The grants kept in step with the registry; the gateway's hooks write to it."""

    def __init__(self, config: ServiceConfig, registry: Registry, tenants: Tenants) -> None:
        self.config = config
        self.registry = registry
        self.tenants = tenants
        self.gateway = Gateway(prices=config.prices)
        self.budgets = Budgets(registry.spend, tenants, self.gateway, Metrics(), self._refused,
                               owner=holds_owner(config))
        self.gateway.on_audit = self._audited
        self.traces = exporter_of(config, Metrics(), service="flower-gateway")
        if self.traces is not None:
            self.gateway.spans = WireSpans(self.traces)
        if config.backend == "kubernetes":
            self.gateway.resolve = self._resolve
        self.egress = EgressProxy.of(config, "gateway")  # squid starts with the first run that has an allow-list
        self._failed: dict[str, str] = {}  # run → why its grant could not be opened (logged once)
        self._lookup: asyncio.Task[dict[str, Run]] | None = None  # the registry read unknown tokens share
        self._looked = -RESOLVE_S  # when (loop time) it began
        self.poked = asyncio.Event()  # a service asked for a pass now (``listen_for_pokes``)

    # -- the registry's side ---------------------------------------------------------------------
    async def sync(self) -> None:
        """One pass: grants opened for the active runs that have none (or a new token), closed for the rest."""
        rows = await asyncio.to_thread(self.registry.runs.active_grants)
        names = {t.name for t in self.tenants.all()}
        wanted = {r.id: r for r in rows if r.tenant in names}
        for grant in self.gateway.grants():
            row = wanted.get(grant.run_id)
            if row is None or row.token_sha256 != grant.token_hash:
                await self.gateway.close(grant.run_id)
                log.info("gateway.grant_closed", tenant=grant.tenant, run=grant.run_id)
        for run in wanted.values():
            if self.gateway.grant(run.id) is None:
                await self._open(run)
        await self._egress(wanted)
        for run_id in set(self._failed) - set(wanted):
            del self._failed[run_id]

    async def _open(self, run: Run) -> Grant | None:
        """The run's grant opened — or the one another opener (a pass, a first request) opened meanwhile: a second
        would replace it, and what it holds with it (a refusal, what it has spent)."""
        grant = await self._grant_of(run)
        if grant is None:
            return None
        opened = self.gateway.grant(run.id)
        if opened is not None and opened.token_hash == grant.token_hash:
            return opened
        folder = None if self.config.backend == "kubernetes" else layout_of(self.config.runs_root, run).gateway
        try:
            await self.gateway.open(grant, folder)
        except OSError as e:  # its folder went (the run is ending): the next pass sees its row
            self._failed_once(run, f"its socket could not be opened ({type(e).__name__}: {one_line(e, 200)})")
            await self.gateway.close(run.id)
            return None
        tenant = self.tenants.get(run.tenant)
        if tenant is not None:
            self.budgets.check(grant, tenant)
        log.info("gateway.grant_opened", tenant=run.tenant, run=run.id, spent_usd=round(run.cost_usd, 6))
        return grant

    async def _grant_of(self, run: Run) -> Grant | None:
        """The run's grant as its row and its tenant's credentials file say (what it spent so far included)."""
        from sandbox.envfile import read_env_file

        tenant = self.tenants.get(run.tenant)
        if tenant is None or not run.token_sha256:
            return None
        try:
            values = await asyncio.to_thread(read_env_file, tenant.credentials)
        except (OSError, ValueError) as e:
            self._failed_once(run, f"its tenant's credentials file could not be read ({type(e).__name__})")
            return None
        run_id = run.id
        budget = await asyncio.to_thread(self.registry.spend.run_budget, run_id)
        return grant_of(run, tenant, values, run.token_sha256, spent=True, budget_usd=budget,
                        on_first=lambda: self.registry.wire_audit.record_first_request(run_id, time.time()))

    async def _egress(self, wanted: dict[str, Run]) -> None:
        """The allow-list's socket beside the gateway's, for each active run whose tenant has one (its rules as the
        tenants file says now); gone for the rest (``service.egress``)."""
        for run_id in set(self.egress.keys()) - set(wanted):
            await asyncio.to_thread(self.egress.close, run_id)
        if self.config.backend == "kubernetes":
            return
        for run in wanted.values():
            tenant = self.tenants.get(run.tenant)
            if tenant is None or tenant.egress != "proxied":
                if run.id in self.egress.keys():
                    await asyncio.to_thread(self.egress.close, run.id)
                continue
            folder = layout_of(self.config.runs_root, run).gateway
            try:
                await asyncio.to_thread(self.egress.open, run.id, tenant.name, tenant.egress_allow, folder)
            except (OSError, SquidError) as e:
                self._failed_once(run, f"its egress socket could not be opened ({type(e).__name__}: "
                                       f"{one_line(e, 300)})")

    def _failed_once(self, run: Run, why: str) -> None:
        if self._failed.get(run.id) != why:
            self._failed[run.id] = why
            log.warning("gateway.grant_failed", tenant=run.tenant, run=run.id, error=why,
                        hint="tried again every pass while the run is active")

    async def _resolve(self, digest: str) -> Grant | None:
        """Kubernetes: a token no grant holds yet — the run may have started since the last pass. Looked up in a
        read of the registry that began after the request came (``_tokens``): one a run was given before it asked
        is there; one nobody was given costs a share of a read, not a read."""
        row = (await self._tokens()).get(digest)
        if row is None or self.tenants.get(row.tenant) is None:
            return None
        return self.gateway.grant(row.id) or await self._open(row)

    async def _tokens(self) -> dict[str, Run]:
        """The active runs by their token's hash, from a read of the registry that started after this was called.
        Unknown tokens share their reads: one at a time, each at least ``RESOLVE_S`` after the one before — a peer
        sending token after token (any number of peers) makes the gateway read the active runs no more often than
        that, where each token used to cost a read of its own."""
        loop = asyncio.get_running_loop()
        asked = loop.time()
        while True:
            lookup = self._lookup
            if lookup is not None and self._looked >= asked:
                return await asyncio.shield(lookup)
            if lookup is not None and not lookup.done():
                await asyncio.wait([lookup])  # began before we asked: the next one is ours
                continue
            if (wait := self._looked + RESOLVE_S - loop.time()) > 0:
                await asyncio.sleep(wait)  # another waiter may start the read meanwhile: looked at again
                continue
            self._looked = loop.time()
            self._lookup = loop.create_task(self._read_tokens(), name="flower-gateway-resolve")

    async def _read_tokens(self) -> dict[str, Run]:
        try:
            rows = await asyncio.to_thread(self.registry.runs.active_grants)
        except Exception as e:  # noqa: BLE001 - the registry away: no token is found (401), the client tries again
            log.warning("gateway.resolve_failed", error=f"{type(e).__name__}: {one_line(e, 300)}")
            return {}
        return {r.token_sha256: r for r in rows if r.token_sha256}

    # -- the gateway's hooks ---------------------------------------------------------------------
    def _audited(self, grant: Grant) -> None:
        self.registry.wire_audit.record(grant.run_id, grant.counts)

    @staticmethod
    def _refused(run_id: str, why: str) -> None:
        """Over budget: the grant answers 403 from now on; the scheduler stops the run from its row."""

    async def run(self, stop: asyncio.Event, *, parent: int | None = None) -> None:
        """Pass after pass until ``stop`` — or the data dir is gone, or the ``parent`` is gone with no run active
        for ``ORPHAN_EXIT_S``: nothing left to serve."""
        idle_since: float | None = None
        while not stop.is_set():
            if not self.config.data_path.is_dir():
                log.warning("gateway.data_dir_gone", data_dir=self.config.data_dir)
                return
            if parent is not None and not self.gateway.grants() and not _alive(parent):
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > ORPHAN_EXIT_S:
                    log.info("gateway.orphaned", parent=parent, why="the service that started it is gone and no "
                                                                    "run is active")
                    return
            else:
                idle_since = None
            try:
                await self.sync()
                await asyncio.to_thread(self.budgets.renew_due)
            except Exception as e:  # noqa: BLE001 - a pass that fails (the database away) is tried again
                log.warning("gateway.sync_failed", error=f"{type(e).__name__}: {one_line(e, 300)}")
            await self._rest(stop)

    async def _rest(self, stop: asyncio.Event) -> None:
        """Until the next pass: ``SYNC_S``, or less when stopped or poked."""
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.poked.wait())]
        try:
            await asyncio.wait(waits, timeout=SYNC_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        self.poked.clear()

    def listen_for_pokes(self, loop: asyncio.AbstractEventLoop) -> socket.socket | None:
        """The datagram socket services poke (``metering.poke``), bound in the data dir and read on ``loop``; None
        where it cannot be (the passes then come every ``SYNC_S``, as they would anyway)."""
        fd = os.open(self.config.data_path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            try:
                os.unlink(WAKE_NAME, dir_fd=fd)  # an earlier gateway's: this one holds the lock now
            except FileNotFoundError:
                pass
            sock.bind(f"/proc/self/fd/{fd}/{WAKE_NAME}")
        except OSError as e:
            sock.close()
            log.warning("gateway.no_pokes", error=f"{type(e).__name__}: {one_line(e, 200)}",
                        hint=f"runs wait up to {SYNC_S:g} s for their socket")
            return None
        finally:
            os.close(fd)
        sock.setblocking(False)

        def drain() -> None:
            try:
                while sock.recv(64):
                    pass
            except OSError:
                pass
            self.poked.set()

        loop.add_reader(sock, drain)
        return sock


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def serve_gateway(config: ServiceConfig, *, parent: int | None = None) -> int:
    """The gateway's process: the lock, the registry, the passes, until SIGTERM. Returns the exit status."""
    config.data_path.mkdir(parents=True, exist_ok=True, mode=0o700)
    config.runs_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = await asyncio.to_thread(take_lock, lock_path(config))
    if fd is None:
        log.info("gateway.already_serving", data_dir=config.data_dir,
                 hint=f"another gateway process holds {lock_path(config)}; this one leaves it to serve")
        return 0
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    registry = open_registry(config)
    if released := registry.spend.release_holds(holds_owner(config)):
        log.info("gateway.holds_released", holds=released, why="the calls a gateway before this one had in flight")
    tenants = Tenants(config.tenants, on_reload_error=lambda why: log.error("tenants.reload_failed", error=why),
                      presets=config.presets())
    process = GatewayProcess(config, registry, tenants)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    pokes = process.listen_for_pokes(loop)
    try:
        if config.gateway_port is not None:
            port = await process.gateway.listen_tcp(config.gateway_host, config.gateway_port)
            log.info("gateway.listening", host=config.gateway_host, port=port)
        log.info("gateway.serving", pid=os.getpid(), data_dir=config.data_dir, registry=registry.where)
        await process.run(stop, parent=parent)
    finally:
        if pokes is not None:
            loop.remove_reader(pokes)
            pokes.close()
        await process.gateway.aclose()
        await asyncio.to_thread(process.egress.shutdown)
        if process.traces is not None:
            await asyncio.to_thread(process.traces.close)
        registry.close()
        os.close(fd)
        log.info("gateway.stopped", pid=os.getpid())
    return 0

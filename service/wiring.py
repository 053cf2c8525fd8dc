"""The one place the service's parts are made and handed to each other (``build``), in this order:

1. the shared ones: the ``Clock`` (wall and monotonic time: every part below reads it, none reads ``time``), the
   ``Gate`` (the guard canary's word: held, refused or open), the ``Hooks`` (the scheduler's callbacks, bound
   when it is built last), ``Metrics``, the in-process ``Gateway``, ``Health`` (disk and engine), the
   ``LiveRuns`` records and the ``RepeatLog`` of failing paths;
2. money and access: ``Budgets`` (the spend table; a budget crossed → ``hooks.over_budget``), ``StreamSlots``
   (the streams table), ``Grants`` (each run's gateway token; its ``Metering``: where the gateway lives);
3. results: ``Webhooks`` (the deliveries table) inside ``Results`` (the runs table);
4. following runs: ``Leases`` (the leases and replicas tables; each renewal round also renews the stream slots
   and the gateway's holds), ``EventFeed``, ``Harvest``, ``WarmKeeper``, ``Launcher`` (warm + harvest + grants),
   ``Mailbox`` (→ ``hooks.wake``), ``Retention`` (harvest, and the live runs it must not touch);
5. the scheduler's rooms: ``Following`` (what they share), ``Finisher``, ``Starter``, ``Recovery``; then the
   ``Scheduler`` (the runs table and the registry's ``listen``; it binds the hooks), and ``RunControl``: what the
   API may ask of the runs (cancel, delete, a run's folder, its event feed);
6. asks that come by themselves: ``Admission`` (the submit rules: the runs table, health, the gate's refusal,
   ``hooks.wake``), ``Schedules`` (the schedules table; it submits through the admission and cancels through the
   mailbox) and ``Triggers`` (a schedule's own URL and token; it fires through the schedules).

Who receives what: each part the tables named in its constructor, nothing more; the API
(``service.api.deps.dependencies``) the runs, spend and deliveries tables, the config, the clock, the gate,
health, the mailbox, run control, the stream slots, results and metrics — never the scheduler or the registry
whole; the app (``service.app``) starts and stops the scheduler, resets this replica's stream slots and runs the
canary against the gate. The gateway's own process (``python -m service gateway``, ``service.gateway.daemon``)
makes its meter itself: it shares no object with this one, only the registry's tables.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

from sandbox.backends.base import Backend
from sandbox.layout import RunLayout

from .clock import SYSTEM, Clock
from .config import ServiceConfig
from .control.admission import Admission
from .control.backoff import Backoff, RepeatLog
from .control.environments import Environments
from .control.feed import EventFeed, Item
from .control.finishing import Finisher
from .control.following import Following
from .control.gate import Gate
from .control.grants import Grants
from .control.harvest import Harvest
from .control.health import Health
from .control.hooks import Hooks
from .control.launcher import Launcher
from .control.leases import Leases
from .control.live import LiveRuns, layout_of
from .control.mailbox import Mailbox
from .control.parking import Parking
from .control.recovery import Recovery
from .control.retention import Retention
from .control.schedules import Schedules
from .control.scheduler import Scheduler
from .control.starting import Starter
from .control.streams import StreamSlots
from .control.triggers import Triggers
from .control.warm import WarmKeeper
from .gateway import Gateway
from .gateway.budgets import Budgets
from .logging import get_logger
from .metrics import Metrics
from .registry import Registry, Run
from .results import Results
from .results.webhooks import Webhooks
from .tenants import Tenants
from .tracing import Exporter, RunSpans, WireSpans, exporter_of

__all__ = ["Service", "RunControl", "build"]


class RunControl:
    """What the API may do to a run: cancel it, delete it and its files, find its folder, follow its events."""

    def __init__(self, config: ServiceConfig, mailbox: Mailbox, retention: Retention, feed: EventFeed) -> None:
        self._runs_root = config.runs_root
        self._mailbox, self._retention, self._feed = mailbox, retention, feed

    def layout(self, run: Run) -> RunLayout:
        return layout_of(self._runs_root, run)

    def request_cancel(self, run_id: str) -> None:
        self._mailbox.request_cancel(run_id)

    async def delete(self, run: Run, *, branch: bool) -> Run:
        return await self._retention.delete(run, branch=branch)

    def subscribe(self, run_id: str) -> asyncio.Queue[Item]:
        return self._feed.subscribe(run_id)

    def unsubscribe(self, run_id: str, queue: asyncio.Queue[Item]) -> None:
        self._feed.unsubscribe(run_id, queue)


@dataclass(frozen=True)
class Service:
    """The parts ``build`` made, for the app (``service.app``), the API's dependencies and the tests."""

    config: ServiceConfig
    registry: Registry
    tenants: Tenants
    backend: Backend
    clock: Clock
    gate: Gate
    hooks: Hooks
    metrics: Metrics
    gateway: Gateway
    health: Health
    budgets: Budgets
    slots: StreamSlots
    grants: Grants
    results: Results
    leases: Leases
    feed: EventFeed
    mailbox: Mailbox
    retention: Retention
    scheduler: Scheduler
    runs: RunControl
    admission: Admission
    schedules: Schedules
    triggers: Triggers
    environments: Environments
    traces: Exporter | None = None
    """Where this process's spans go (``otlp_endpoint``; None: traces are off); the app closes it last."""


def build(config: ServiceConfig, registry: Registry, tenants: Tenants, backend: Backend, *,
          clock: Clock = SYSTEM, gateway: Gateway | None = None, metrics: Metrics | None = None) -> Service:
    """Every part of the service's control plane, made once, in dependency order (the module's docstring)."""
    gate, hooks = Gate(), Hooks()
    metrics = metrics or Metrics()
    gateway = gateway or Gateway(prices=config.prices)
    health = Health(config.data_path, config.min_free_mb, config.backend, clock=clock)
    live = LiveRuns()
    errors = RepeatLog(get_logger("flower.service.scheduler"), clock=clock)
    owner = config.replica or socket.gethostname()

    budgets = Budgets(registry.spend, tenants, gateway, metrics, hooks.over_budget,
                      owner=f"service {owner} {config.data_path}", clock=clock)
    slots = StreamSlots(registry.streams, owner, ttl=config.lease_s, clock=clock)
    grants = Grants(config, registry.spend, registry.wire_audit, tenants, gateway, budgets, metrics, clock=clock)

    webhooks = Webhooks(registry.deliveries, tenants, retry_s=config.webhook_retry_s, slots=config.webhook_slots,
                        tenant_slots=config.webhook_tenant_slots, clock=clock, fired=registry.schedules.fired)
    results = Results(registry.runs, tenants, webhooks)

    def renewed() -> None:  # with the leases, in their renewer's thread: what lives as long as this replica does
        slots.renew()
        grants.metering.renew()

    leases = Leases(registry.leases, registry.replicas, owner, config.lease_s, live, errors, also=renewed,
                    clock=clock)
    traces = exporter_of(config, metrics)
    feed = EventFeed(registry.runs, results, metrics, RunSpans(traces, now=clock.now) if traces else None)
    if traces is not None:  # the in-process gateway's model and tool calls (gateway_process = "inside")
        gateway.spans = WireSpans(traces, now=clock.now)
    harvest = Harvest(config, registry.runs)
    warm = WarmKeeper.of(backend, config.runs_root, config.warm, registry.runs, registry.leases, tenants, metrics,
                         errors, replica=owner if registry.dialect == "postgresql" else None,
                         lease_s=config.lease_s, clock=clock)
    warm.environments = environments = Environments(config, backend)
    launcher = Launcher(config, backend, warm, harvest, grants.open, environments)
    mailbox = Mailbox(config.runs_root, registry.runs, backend, ended=feed.publish_end, wake=hooks.wake, clock=clock)
    retention = Retention(config, registry.runs, harvest, is_live=live.__contains__, clock=clock)

    following = Following(config, registry.runs, live, leases,
                          Backoff(base=max(0.5, 2 * config.poll_s), cap=30.0, clock=clock), errors, health)
    finisher = Finisher(config, registry.runs, backend, following=following, grants=grants, harvest=harvest,
                        feed=feed, results=results, metrics=metrics, hooks=hooks, clock=clock)
    starter = Starter(config, registry.runs, tenants, following=following, finisher=finisher, gate=gate,
                      budgets=budgets, launcher=launcher, grants=grants, results=results, metrics=metrics,
                      clock=clock)
    parking = Parking(config, registry.runs, tenants, backend, following=following, grants=grants, harvest=harvest,
                      mailbox=mailbox, results=results, metrics=metrics, hooks=hooks, clock=clock)
    recovery = Recovery(config, registry.runs, backend, following=following, finisher=finisher, parking=parking,
                        grants=grants, harvest=harvest)
    scheduler = Scheduler(config, registry.runs, tenants, backend, listen=registry.listen, clock=clock, hooks=hooks,
                          following=following, starter=starter, finisher=finisher, recovery=recovery,
                          parking=parking, grants=grants, results=results, feed=feed, harvest=harvest, warm=warm,
                          retention=retention)

    admission = Admission(config, registry.runs, health, refusal=lambda: gate.refused, wake=hooks.wake)
    schedules = Schedules(config, registry.schedules, registry.runs, tenants, admission, mailbox.request_cancel,
                          owner=owner, clock=clock)
    return Service(config=config, registry=registry, tenants=tenants, backend=backend, clock=clock, gate=gate,
                   hooks=hooks, metrics=metrics, gateway=gateway, health=health, budgets=budgets, slots=slots,
                   grants=grants, results=results, leases=leases, feed=feed, mailbox=mailbox, retention=retention,
                   scheduler=scheduler, runs=RunControl(config, mailbox, retention, feed), admission=admission,
                   schedules=schedules, triggers=Triggers(config, registry.schedules, admission, tenants, clock=clock),
                   environments=environments, traces=traces)

"""The registry: every state a run goes through, and what the service keeps beside it, in one SQLite file (WAL)
under data_dir or in PostgreSQL when ``database_url`` names one (``open_registry``). One schema for both
(``tables``), migrated by Alembic at open (``migrate``); what the two databases spell differently is in
``dialects``.

A house of tables. ``Registry`` opens the one database object (``db.Database``: the engine, the guarded writes,
LISTEN/NOTIFY, open/migrate/refuse) and gives each table its room; the rest of the service is handed only the
rooms it uses, so the type checker proves what each may touch:

    runs         RunsTable       the runs and their status; a live run's writes fenced by its lease (``under``)
    spend        SpendTable      each tenant's spend per day and the holds of calls in flight (the gateway, budgets)
    leases       LeasesTable     which replica follows each live run (service.control.leases)
    replicas     ReplicasTable   one live process per replica name (service.control.leases)
    streams      StreamsTable    the tenants' SSE slots across replicas (service.control.streams)
    wire_audit   WireAuditTable  the gateway's audit counts and first requests (the gateway's process, the scheduler)
    deliveries   DeliveriesTable webhook deliveries and their tries (service.results.webhooks)
    schedules    SchedulesTable  scheduled asks, their due ticks held like leases, what each fired (control.schedules)

``rows`` holds what a row is (``Run``, ``Lease``, …); ``integrity`` whether a SQLite file is ours (``foreign``: a
trigger, a view, a column not ours, a row naming another run's folder — refused at open and at restore); ``backup``
the online copy and restore. Nothing here imports a sandbox backend, the scheduler or the API.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..config import ServiceConfig
from . import dialects
from .db import CHANNEL, SCHEMA, Database
from .deliveries import DeliveriesTable
from .integrity import foreign
from .leases import LeasesTable
from .replicas import ReplicasTable
from .rows import (ACTIVE, STATUSES, TERMINAL, Delivery, DeliveryState, Ending, Kept, Lease, Loss, LossCause, Push,
                   Replica, Run, RunStatus, Spent, Standing)
from .runs import HeldRun, RunsTable
from .schedules import SchedulesTable
from .spend import SpendTable
from .streams import StreamsTable
from .wire_audit import WireAuditTable

__all__ = ["Registry", "Database", "Run", "Loss", "LossCause", "Kept", "Lease", "Standing", "Spent", "RunStatus", "Ending", "Push",
           "Delivery", "DeliveryState", "Replica", "ACTIVE", "TERMINAL", "STATUSES", "SCHEMA", "CHANNEL", "foreign",
           "open_registry", "RunsTable", "HeldRun", "SpendTable", "LeasesTable", "ReplicasTable", "StreamsTable",
           "WireAuditTable", "DeliveriesTable", "SchedulesTable"]


class Registry:
    """The database and its tables, opened together (``Registry(path)`` a SQLite file, ``Registry.postgres(url)``)."""

    def __init__(self, path: str | Path | Database) -> None:
        self.db = path if isinstance(path, Database) else Database.sqlite(path)
        self.runs = RunsTable(self.db)
        self.spend = SpendTable(self.db)
        self.leases = LeasesTable(self.db)
        self.replicas = ReplicasTable(self.db)
        self.streams = StreamsTable(self.db)
        self.wire_audit = WireAuditTable(self.db)
        self.deliveries = DeliveriesTable(self.db)
        self.schedules = SchedulesTable(self.db)

    @classmethod
    def postgres(cls, url: str, *, lock_timeout_s: float = 60.0) -> Registry:
        """The registry in the PostgreSQL database ``url`` names, migrated (once, whichever replica is first)."""
        return cls(Database.postgres(url, lock_timeout_s=lock_timeout_s))

    @property
    def path(self) -> Path | None:
        """The SQLite file (None on PostgreSQL)."""
        return self.db.path

    @property
    def where(self) -> str:
        """The file, or the database and host: for sentences (never a password)."""
        return self.db.where

    @property
    def dialect(self) -> dialects.Dialect:
        return self.db.dialect

    @property
    def revision(self) -> str:
        return self.db.revision

    @property
    def migrated_from(self) -> str | None:
        return self.db.migrated_from

    def listen(self, wake: Callable[[], None]) -> Callable[[], None]:
        """``wake()`` whenever any replica queues a run or changes one's status (``Database.listen``)."""
        return self.db.listen(wake)

    def close(self) -> None:
        self.db.close()


def open_registry(config: ServiceConfig) -> Registry:
    """The registry the config names: PostgreSQL when ``database_url`` is set, else the SQLite file in data_dir."""
    if config.database_url:
        return Registry.postgres(config.database_url)
    return Registry(config.db_path)

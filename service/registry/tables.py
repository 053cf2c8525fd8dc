"""The registry's schema, once, as SQLAlchemy Core tables: the same rows on SQLite and on PostgreSQL.

Types say what a value is, not how one database spells it (``service.dialects`` holds every spelling that
differs): ``Real`` is SQLite's REAL and PostgreSQL's DOUBLE PRECISION, ``Int64`` a counter that may pass 2³¹
(bytes read, tokens in a day), ``LargeBinary`` BLOB or BYTEA. Columns are in the order a schema-3 file has them:
the ones after ``deleted`` were added since version 1 (``ADDED_SINCE_V1``), so a file from then may lack them
until it is migrated. A run's folder is unique: a warm slot is claimed by one run only.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, Integer, LargeBinary, MetaData, Table, Text, text

from .dialects import Int64, Real

__all__ = ["metadata", "runs", "spend", "deliveries", "leases", "wire_audit", "holds", "streams", "replicas",
           "schedules", "fires", "ADDED_SINCE_V1"]

metadata = MetaData()

_ZERO = text("0")

runs = Table(
    "runs", metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("ask", Text, nullable=False),
    Column("options", Text, nullable=False, server_default=text("'{}'")),
    Column("status", Text, nullable=False),
    Column("repo", Text, nullable=False, server_default=text("''")),
    Column("handle", Text),
    Column("branch", Text),
    Column("base", Text),
    Column("commit_sha", Text),
    Column("created", Real, nullable=False),
    Column("started", Real),
    Column("ended", Real),
    Column("cost_usd", Real, nullable=False, server_default=_ZERO),
    Column("error", Text),
    Column("step", Text),
    Column("diffstat", Text),
    Column("event_offset", Int64, nullable=False, server_default=_ZERO),
    Column("event_seq", Int64, nullable=False, server_default=_ZERO),
    Column("cancel_requested", Integer, nullable=False, server_default=_ZERO),
    Column("disk_bytes", Int64),
    Column("deleted", Real),
    Column("input_tokens", Int64, nullable=False, server_default=_ZERO),
    Column("output_tokens", Int64, nullable=False, server_default=_ZERO),
    Column("cache_write_tokens", Int64, nullable=False, server_default=_ZERO),
    Column("cache_read_tokens", Int64, nullable=False, server_default=_ZERO),
    Column("claimed_cost_usd", Real, nullable=False, server_default=_ZERO),
    Column("token_sha256", Text),
    Column("folder", Text),
    Column("push", Text),
    Column("losses", Text),
    Column("sandboxes", Integer, nullable=False, server_default=_ZERO),
    Column("parked_at", Real),
    Column("wake_at", Real),
    Column("not_before", Real),
)
Index("runs_tenant", runs.c.tenant, runs.c.created)
Index("runs_status", runs.c.status, runs.c.created)
Index("runs_folder", runs.c.folder, unique=True)

spend = Table(
    "spend", metadata,
    Column("tenant", Text, primary_key=True),
    Column("day", Text, primary_key=True),
    Column("cost_usd", Real, nullable=False, server_default=_ZERO),
    Column("input_tokens", Int64, nullable=False, server_default=_ZERO),
    Column("output_tokens", Int64, nullable=False, server_default=_ZERO),
)

deliveries = Table(
    "deliveries", metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("run", Text, nullable=False),
    Column("event", Text, nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("created", Real, nullable=False),
    Column("state", Text, nullable=False),
    Column("attempts", Integer, nullable=False, server_default=_ZERO),
    Column("last_status", Integer),
    Column("last_error", Text),
    Column("next_try", Real),
    Column("ended", Real),
)
Index("deliveries_tenant", deliveries.c.tenant, deliveries.c.created)
Index("deliveries_state", deliveries.c.state, deliveries.c.created)

# Who follows each live run (``Registry.take``): one replica at a time, until ``expires`` unless renewed.
# ``generation`` is the fencing token: it goes up at every take, and a run's writes hold only under the generation
# their writer took — a replica paused past its lease cannot write once another has taken the run.
leases = Table(
    "leases", metadata,
    Column("run_id", Text, primary_key=True),
    Column("owner", Text, nullable=False),
    Column("generation", Int64, nullable=False),
    Column("expires", Real, nullable=False),
)

wire_audit = Table(  # since v0003: the gateway's own audit counts of a run, written by the gateway's process
    "wire_audit", metadata,
    Column("run", Text, primary_key=True),
    Column("tool_calls", Int64, nullable=False, server_default=_ZERO),
    Column("denials", Int64, nullable=False, server_default=_ZERO),
    Column("spills", Int64, nullable=False, server_default=_ZERO),
    Column("first_request", Real),  # when its first model request came (the start histogram's end)
)

# Money promised to the model calls in flight (since v0004): each call a gateway lets through holds the most it can
# cost until its answer is metered (``Registry.hold`` / ``add_usage``). Kept in the database, not in a gateway, so
# that every gateway admits against what every other one has let through. ``owner`` is the gateway that took it
# (a gateway started again lets its own go), ``expires`` when it stops counting if nobody settles it.
holds = Table(
    "holds", metadata,
    Column("id", Text, primary_key=True),
    Column("run", Text, nullable=False),
    Column("tenant", Text, nullable=False),
    Column("day", Text, nullable=False),
    Column("amount", Real, nullable=False),
    Column("owner", Text, nullable=False),
    Column("expires", Real, nullable=False),
)
Index("holds_tenant", holds.c.tenant, holds.c.day)
Index("holds_run", holds.c.run)

# The SSE streams open per tenant, across replicas (since v0004): a stream takes one of its tenant's
# ``max_streams_per_tenant`` numbered slots — the primary key is the cap — and its replica renews it until the
# stream ends; a replica that died leaves its slots to run out at ``expires``, or to be let go when it starts again.
streams = Table(
    "streams", metadata,
    Column("tenant", Text, primary_key=True),
    Column("slot", Integer, primary_key=True),
    Column("replica", Text, nullable=False),
    Column("holder", Text, nullable=False),
    Column("expires", Real, nullable=False),
)

# Each live replica's name (since v0005): one row per ``replica`` name, held by one process at a time (``instance``,
# random at each start) while its heartbeat is renewed with its leases; a name whose heartbeat ran out (``expires``)
# may be claimed again. ``process`` says where the holder runs (boot id, pid namespace, pid, start time), so that a
# holder on this host that is gone is known to be gone at once. The leases name their replica: two live processes
# under one name would each think the other's leases their own.
replicas = Table(
    "replicas", metadata,
    Column("name", Text, primary_key=True),
    Column("instance", Text, nullable=False),
    Column("process", Text, nullable=False, server_default=text("''")),
    Column("heartbeat", Real, nullable=False),
    Column("expires", Real, nullable=False),
)

# A tenant's scheduled asks (since v0007): the ask and its options, a cron expression read in ``timezone``, a budget
# per run and what a tick does while the last run is still live (``overlap``). ``next_at`` is the tick due next;
# a replica firing it holds it like a lease (``holder`` until ``expires``, ``generation`` the fencing token), so each
# tick fires once across replicas, also when the replica holding it dies. ``trigger_sha256``: the hash of the
# schedule's own trigger token (None: no trigger, or revoked).
schedules = Table(
    "schedules", metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("ask", Text, nullable=False),
    Column("options", Text, nullable=False, server_default=text("'{}'")),
    Column("cron", Text),
    Column("timezone", Text, nullable=False, server_default=text("'UTC'")),
    Column("budget_usd", Real),
    Column("overlap", Text, nullable=False),
    Column("paused", Integer, nullable=False, server_default=_ZERO),
    Column("created", Real, nullable=False),
    Column("next_at", Real),
    Column("holder", Text),
    Column("generation", Int64, nullable=False, server_default=_ZERO),
    Column("expires", Real),
    Column("trigger_sha256", Text),
    Column("last_run", Text),
)
Index("schedules_tenant", schedules.c.tenant, schedules.c.created)
Index("schedules_due", schedules.c.next_at)
Index("schedules_trigger", schedules.c.trigger_sha256, unique=True)

# What each tick or trigger of a schedule did (since v0007): the run it started (its id derived from the schedule
# and the tick, so a tick fired again after its replica died finds its run and starts none), or why none
# (``outcome``), what fired it (``fired_by``: "schedule" or "trigger"), and the run's budget.
fires = Table(
    "fires", metadata,
    Column("schedule", Text, primary_key=True),
    Column("tick", Real, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("run", Text),
    Column("fired_by", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("why", Text),
    Column("budget_usd", Real),
    Column("at", Real, nullable=False),
)
Index("fires_run", fires.c.run)

# Columns a file of schema 1 or 2 may not have yet (the migration adds them; ``integrity.foreign`` lets them be
# missing).
ADDED_SINCE_V1 = frozenset({"disk_bytes", "deleted", "input_tokens", "output_tokens", "cache_write_tokens",
                            "cache_read_tokens", "claimed_cost_usd", "token_sha256", "folder", "push", "losses",
                            "sandboxes", "parked_at", "wake_at", "not_before"})

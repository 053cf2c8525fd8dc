"""What the registry's rows are, as the rest of the service reads them: a run and its status, a lease, a
replica's name, a hold's standing, a webhook delivery, a push — and the checks that a row names only what is its
own (a run's folder is its id or a warm slot's; its handle names that folder)."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from typing import Any, Literal, get_args

import msgspec
from sqlalchemy import ColumnElement, RowMapping, Select

from sandbox.layout import folder_of, valid_run_id
from sandbox.pool import SLOT_PREFIX

from ..errors import RegistryDamaged

__all__ = ["Run", "Loss", "LossCause", "Kept", "Lease", "Standing", "Spent", "RunStatus", "Ending", "Push", "Delivery", "DeliveryState",
           "Replica", "ACTIVE", "TERMINAL", "STATUSES", "COLUMNS", "plain", "convert", "run_of", "not_its_own",
           "stored", "ordered"]

RunStatus = Literal["queued", "starting", "running", "parked", "succeeded", "failed", "aborted", "cancelled",
                    "killed"]
"""Every status a run is in (``service.registry.runs``' diagram); ``service.api.schemas.Status`` is this one.
``parked``: it waits for a person with no sandbox — no process, no slot, no token; an answer queues it again."""
Ending = Literal["succeeded", "failed", "aborted", "cancelled", "killed"]
STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
ACTIVE: tuple[RunStatus, ...] = ("starting", "running")
TERMINAL: tuple[Ending, ...] = get_args(Ending)

_SLOT_RE = re.compile(re.escape(SLOT_PREFIX) + r"[0-9a-f]{1,58}")


class Push(msgspec.Struct, kw_only=True):
    """A finished run's branch pushed to its tenant's ``push_url`` (``service.results.push``): pending while the push runs,
    then pushed or failed (``error`` names why, never the credential)."""
    state: Literal["pending", "pushed", "failed"]
    url: str
    ref: str
    commit: str
    error: str | None = None
    at: float | None = None
    attempts: int = 0


DeliveryState = Literal["pending", "delivered", "failed"]


class Delivery(msgspec.Struct, kw_only=True):
    """One webhook delivery (``service.results.webhooks``): the signed body as first built, and how its tries went."""
    id: str
    tenant: str
    run: str
    event: str
    body: bytes
    created: float
    state: DeliveryState = "pending"
    attempts: int = 0
    last_status: int | None = None
    """The HTTP status of the last try (None: no answer — refused, timed out)."""
    last_error: str | None = None
    next_try: float | None = None
    ended: float | None = None
    """When it was delivered, or given up on."""


class Lease(msgspec.Struct, kw_only=True, frozen=True):
    """A replica's hold on one live run (``LeasesTable.take``): ``generation`` is the fencing token its writes carry."""

    run_id: str
    owner: str
    generation: int
    expires: float


class Replica(msgspec.Struct, kw_only=True, frozen=True):
    """Who holds a replica's name (``ReplicasTable.claim``): one process, until its heartbeat runs out."""

    name: str
    instance: str
    """Random at each start: two processes under one name are two instances."""
    process: str
    """Where the holder runs (``service.control.leases.process_mark``), to tell at once that a holder on this host is gone."""
    heartbeat: float
    expires: float


class Standing(msgspec.Struct, kw_only=True, frozen=True):
    """A run and its tenant's day as ``SpendTable.hold`` found them, under the day's lock: what the gateway metered
    (spent) and what the calls in flight may still cost (held, the new call's not included)."""

    run_spent: float
    run_held: float
    day_spent: float
    day_held: float
    taken: bool
    """The call's hold was written: spent, held and the call's own most were within both caps."""


class Spent(msgspec.Struct, kw_only=True, frozen=True):
    """What a run and its tenant's day have spent after an answer was metered (``SpendTable.add_usage``)."""

    run: float
    day: float


LossCause = Literal["crashed", "vanished", "killed"]
"""How a sandbox was lost: it exited without writing exit.json (SIGKILL, out of memory), it is gone (its container
or pod removed, its node lost), or something other than the service stopped it (its engine restarted, its node
drained, its pod evicted: SIGTERM, and its exit.json says killed)."""


class Loss(msgspec.Struct, kw_only=True, frozen=True):
    """One sandbox a run lost and was resumed after (``Run.losses``): what, when, and where the run stood."""

    cause: LossCause
    at: float
    error: str
    """The sentence the run would have failed with."""
    step: str | None = None
    """The step in flight."""
    place: str = ""
    """What was in flight at the loss — a tool call (its name), a model call, or between steps: a run lost twice
    at the same place with no progress between is not resumed again."""
    since_checkpoint_s: float | None = None
    """How much work the loss may have cost: the time since its last checkpoint (its work handed back)."""
    progressed: bool = True
    """The sandbox lost had finished a model turn or a tool call: it was not lost where it started."""


class Kept(msgspec.Struct, kw_only=True, frozen=True):
    """What the row keeps of an ended run's work (``RunsTable.finish``): every field is written, None included."""

    commit_sha: str | None
    branch: str | None
    diffstat: dict[str, Any] | None
    claimed_cost_usd: float
    disk_bytes: int | None


class Run(msgspec.Struct, kw_only=True):
    id: str
    tenant: str
    ask: str
    options: dict[str, Any]
    status: RunStatus
    repo: str = ""
    handle: str | None = None
    branch: str | None = None
    base: str | None = None
    commit_sha: str | None = None
    created: float
    started: float | None = None
    ended: float | None = None
    cost_usd: float = 0.0
    error: str | None = None
    step: str | None = None
    diffstat: dict[str, Any] | None = None
    event_offset: int = 0
    event_seq: int = 0
    cancel_requested: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    claimed_cost_usd: float = 0.0
    """What the run itself reported; ``cost_usd`` is what the gateway measured on the wire."""
    token_sha256: str | None = None
    """The hash of the run's gateway token while it is live."""
    folder: str | None = None
    """The name of the run's folder when it is not the run id: the warm slot it claimed (``sandbox.pool``)."""
    disk_bytes: int | None = None
    """What the run's folder took on disk when last measured (bounded by ``max_run_disk_mb``)."""
    deleted: float | None = None
    """When its files were removed (DELETE or ``retain_days``); the row stays as a tombstone."""
    push: Push | None = None
    """Its branch pushed to the tenant's git remote (``push_url``), or why not."""
    losses: list[Loss] = []
    """The sandboxes it lost and was resumed after, oldest first."""
    sandboxes: int = 0
    """How many sandboxes it has had: a start after the first is a resume in its own folder."""
    parked_at: float | None = None
    wake_at: float | None = None
    """A parked run's earliest question timeout: it is woken then with "no answer"."""
    not_before: float | None = None
    """A lost run waits for this before it starts again (the resume's backoff)."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL



COLUMNS = Run.__struct_fields__


def plain(r: RowMapping | sqlite3.Row) -> dict[str, Any]:
    """A row as a dict keyed by plain ``str`` (SQLAlchemy's column names are a ``str`` subclass msgspec refuses)."""
    return {str(k): r[k] for k in r.keys()}


def convert(r: RowMapping | sqlite3.Row) -> Run:
    d = plain(r)
    d["options"] = json.loads(d["options"] or "{}")
    d["diffstat"] = json.loads(d["diffstat"]) if d["diffstat"] else None
    d["push"] = json.loads(d["push"]) if d.get("push") else None
    d["losses"] = json.loads(d["losses"]) if d.get("losses") else []
    d["cancel_requested"] = bool(d["cancel_requested"])
    return msgspec.convert(d, Run)


def run_of(r: RowMapping | sqlite3.Row) -> Run:
    """A row as a Run, refused if it names what is not its own (whatever wrote the row)."""
    run = convert(r)
    wrong = not_its_own(run)
    if wrong:
        raise RegistryDamaged(f"the registry holds {wrong}: restore a backup this service made")
    return run


def not_its_own(run: Run) -> str | None:
    """What the row names that cannot be its own (its id, its folder, its handle's folder), or None."""
    if not valid_run_id(run.id) or run.id.startswith(SLOT_PREFIX):
        return f"a run with the id {run.id!r}, which no service gives (a folder of that name is not a run's)"
    if run.folder is not None and not _SLOT_RE.fullmatch(run.folder):
        return (f"run {run.id} (tenant {run.tenant}) naming the folder {run.folder!r}: a run's folder is its id "
                f"or a warm slot's {SLOT_PREFIX}<hex>")
    named = folder_of(run.handle) if run.handle else None
    if named is not None and named.name != (run.folder or run.id):
        return f"run {run.id} (tenant {run.tenant}) whose handle names the folder {str(named)!r}, not its own"
    return None


def stored(field: str, value: Any) -> Any:
    """A Run field's value as its column holds it: structs and dicts as JSON text, the flag as 0/1."""
    if isinstance(value, msgspec.Struct):
        return msgspec.json.encode(value).decode()
    if field == "losses":
        return msgspec.json.encode(value).decode() if value else None
    if field in ("options", "diffstat") and value is not None:
        return json.dumps(value, ensure_ascii=False)
    if field == "cancel_requested":
        return int(bool(value))
    return value


def ordered(q: Select[Any], order: Sequence[ColumnElement[Any]], oldest_first: bool,
             limit: int | None) -> Select[Any]:
    q = q.order_by(*(c.asc() if oldest_first else c.desc() for c in order))
    return q if limit is None else q.limit(int(limit))

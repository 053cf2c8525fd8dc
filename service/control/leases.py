"""Which live runs this replica follows: one lease per run in the registry (``Registry.take``), its generation the
fencing token every write of the run carries (``LiveRun.lease``) — and the replica's name, held by one process.

The leases name their replica (``replica``, else the host's name), so two live processes under one name would each
take the other's leases for their own. A replica therefore claims its name at start (``claim``): one row per name
with a heartbeat (``Registry.claim_name``), which a second process finds held and refuses to start, with a
sentence naming ``replica``. The name is free again when its holder stops gracefully (``release``, at once), when
its holder ran on this host and its process is gone (a ``kill -9``: known at once, ``gone``), or else once its
heartbeat ran out (a holder elsewhere, or one paused: after ``ttl``). A holder that finds its name claimed by
another process after all (it was paused past its heartbeat) stops following runs at once: every run is lost to
it, it takes none, it renews nothing (``name_lost``), and it says so in the log.

A thread of its own renews the heartbeat and this replica's leases every quarter of ``ttl``, however long a pass
takes (a pass on a loaded machine may outlast a lease), and with them whatever else must stay alive while this
replica does (``also``: its stream slots, its gateway's budget holds). Each pass then asks ``changes``: the runs the
last renewal no longer held — another replica took them, or another process under this name: forget them, no
write, no stop, no removal — and the live runs no replica holds — their replica stopped: take them over and
re-attach.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..clock import SYSTEM, Clock
from ..config import ENV_PREFIX
from ..errors import ReplicaNameTaken
from ..logging import get_logger
from ..registry import Lease, LeasesTable, Replica, ReplicasTable
from .backoff import RepeatLog
from .live import LiveRuns

__all__ = ["Leases", "Changes", "process_mark", "gone"]

log = get_logger("flower.service.leases")


@dataclass(frozen=True)
class Changes:
    lost: tuple[str, ...]
    """Runs this replica followed that another holds now."""
    orphans: tuple[str, ...]
    """Live runs no replica holds (their lease ran out), not followed here."""


def _stat(pid: int) -> tuple[str, str]:
    """The state and start time (clock ticks since boot) of process ``pid``, from ``/proc/<pid>/stat``."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()  # after the command's name, which may hold spaces
    return fields[0], fields[19]


def process_mark(pid: int | None = None) -> str:
    """Where a process runs — ``<boot id> <pid namespace> <pid> <start time>`` — or "" where ``/proc`` cannot say:
    enough to tell later, from the same host and pid namespace, that this very process is gone (a pid reused by
    another process has another start time)."""
    pid = os.getpid() if pid is None else pid
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot} {os.readlink('/proc/self/ns/pid')} {pid} {_stat(pid)[1]}"
    except (OSError, ValueError, IndexError):
        return ""


def gone(mark: str) -> bool:
    """True only when the process ``mark`` names ran on this host in this pid namespace and is no more (or is a
    zombie); a process elsewhere, or a mark that says nothing, is never known to be gone."""
    parts = mark.split()
    here = process_mark().split()
    if len(parts) != 4 or len(here) != 4 or parts[:2] != here[:2] or not parts[2].isdigit():
        return False
    try:
        state, start = _stat(int(parts[2]))
    except FileNotFoundError:
        return True
    except (OSError, ValueError, IndexError):
        return False
    return state == "Z" or start != parts[3]


class Leases:
    def __init__(self, leases: LeasesTable, replicas: ReplicasTable, owner: str, ttl: float, live: LiveRuns,
                 errors: RepeatLog, *,
                 also: Callable[[], None] = lambda: None, clock: Clock = SYSTEM) -> None:
        self.leases = leases
        self.replicas = replicas
        self.owner = owner
        self.ttl = ttl
        self.clock = clock
        self.instance = secrets.token_hex(8)
        """This process's hold on the name ``owner`` (``claim``): random at each start."""
        self.name_lost: str | None = None
        """Why this replica follows no run any more: another process claimed its name (None while it holds it)."""
        self._live = live
        self._errors = errors
        self._also = also
        self._held: tuple[float, dict[str, Lease]] = (0.0, {})  # the renewer's last round: when, and what it kept
        self._looked = 0.0
        self._stopping = threading.Event()

    def claim(self) -> None:
        """Hold this replica's name before anything is done under it (again: a no-op while it is this process's).
        ``ReplicaNameTaken`` when another live process holds it."""
        now = self.clock.now()
        row = self.replicas.claim(self.owner, self.instance, process_mark(), ttl=self.ttl, now=now)
        if row.instance != self.instance and gone(row.process):  # its holder on this host died (kill -9, a crash)
            log.info("replica.name_reclaimed", replica=self.owner, why="the process that held this name on this host "
                     "is gone")
            row = self.replicas.claim(self.owner, self.instance, process_mark(), ttl=self.ttl, now=now,
                                           over=row.instance)
        if row.instance != self.instance:
            raise self._refusal(row, now)
        self.name_lost = None

    def _refusal(self, row: Replica, now: float) -> ReplicaNameTaken:
        left = max(0.0, row.expires - now)
        where = row.process.split()
        pid = f" (pid {where[2]} on this host)" if len(where) == 4 and where[:2] == process_mark().split()[:2] else ""
        return ReplicaNameTaken(
            f"another live replica holds the name {self.owner!r}{pid}, its heartbeat renewed {now - row.heartbeat:.0f}"
            f" s ago: give each replica its own name with the `replica` setting ({ENV_PREFIX}REPLICA; unset, it is "
            f"the host's name), or, if that replica is gone, start this one again once its heartbeat has run out "
            f"(in {left:.0f} s)", name=self.owner, expires_in_s=left)

    def start(self) -> None:
        self.claim()
        self._stopping.clear()
        threading.Thread(target=self._renew, name="flower-lease-renewer", daemon=True).start()

    def stop(self) -> None:
        """Renew nothing more (the leases and the heartbeat run out unless ``release`` lets the name go)."""
        self._stopping.set()

    def release(self) -> None:
        """A graceful stop, once nothing is done under the name any more: it is free at once — a process started
        again under it takes this one's runs back at once."""
        self._stopping.set()
        if self.name_lost is None:
            self.replicas.release(self.owner, self.instance)

    def hold(self, run_id: str) -> bool:
        """Take ``run_id``'s lease for this replica (it follows the run from now on); False when another holds it."""
        if self.name_lost is not None:
            return False
        lease = self.leases.take(run_id, self.owner, ttl=self.ttl, now=self.clock.now())
        if lease is None:
            return False
        self._live.of(run_id).lease = lease
        return True

    def let_go(self, run_id: str) -> None:
        """The run's lease goes (it ended, or ended elsewhere): only the one this replica holds — a newer stays."""
        live = self._live.get(run_id)
        if live is not None and live.lease is not None:
            self.leases.release(live.lease)

    def taken(self, run_id: str) -> bool:
        """True when this replica followed ``run_id`` and its lease is no longer the one it holds — another replica
        took it, or another process under this name (asked of the registry at once)."""
        live = self._live.get(run_id)
        if live is None or live.lease is None:
            return False
        if self.name_lost is not None:
            return True
        held = self.leases.renew(self.owner, ttl=self.ttl, now=self.clock.now()).get(run_id)
        return held is None or held.generation != live.lease.generation

    def changes(self) -> Changes | None:
        """Every quarter of ``ttl`` (None between): what the renewals found, the renewed leases put on the runs."""
        now = self.clock.now()
        if now - self._looked < self.ttl / 4:
            return None
        self._looked = now
        if self.name_lost is not None:
            return Changes(tuple(live.id for live in self._live if live.lease is not None), ())
        at, held = self._held
        lost = []
        for live in list(self._live):
            if live.lease is None:
                continue
            kept = held.get(live.id)
            if kept is not None and kept.generation == live.lease.generation:
                live.lease = kept
            elif kept is not None and kept.generation > live.lease.generation:
                lost.append(live.id)  # taken again under this name: by another process, never by this one
            elif kept is None and at and live.lease.expires <= at + self.ttl:  # taken before that round, not kept
                lost.append(live.id)
        orphans = tuple(r for r in self.leases.unheld(now=now) if r not in self._live)
        return Changes(tuple(lost), orphans)

    def _renew(self) -> None:
        while not self._stopping.wait(self.ttl / 4):
            now = self.clock.now()
            try:
                if not self.replicas.beat(self.owner, self.instance, ttl=self.ttl, now=now):
                    if not self._stopping.is_set():
                        self._lose_name()
                    return
                self._held = (now, self.leases.renew(self.owner, ttl=self.ttl, now=now))
                self._also()
            except Exception as e:  # noqa: BLE001 - the database away: the leases run out, another replica takes over
                self._errors.error("scheduler.renew_failed", "renew", e)

    def _lose_name(self) -> None:
        self.name_lost = (f"another process started under this replica's name {self.owner!r} while this one was not "
                          f"renewing its heartbeat (paused or cut off for over {self.ttl:g} s): this one follows no "
                          f"run any more; stop it, and give each replica its own name with the `replica` setting")
        log.error("replica.name_taken", replica=self.owner, instance=self.instance, error=self.name_lost)

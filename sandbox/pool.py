"""WarmPool: sandboxes started ahead of their runs, so a run's start skips Python's start and the imports.

A *slot* is a run folder (``warm-<hex>``) with nothing of any run in it — no spec, no env file, no token, no
checkout (an empty folder where it will be) — and a sandbox the backend started on it (``WarmBackend.warm``):
the same mounts, limits and network as a run of that shape, the runner imported and waiting for a spec in its
mailbox. ``claim`` hands out a waiting slot; the caller makes the run's checkout and env file in the slot's
folder and calls ``backend.claim``, which writes the spec last: the sandbox starts the run at once. The run
keeps the slot's folder (``RunLayout(folder=...)``): a sandbox's mounts cannot move.

Slots are kept per *shape*, what a sandbox is started with and cannot change afterwards: the repository's name
(the checkout's mount point), its object store (mounted read-only), the egress (the network) and the settings its
CLI, started ahead in a checkout of the repository's HEAD, inherits (``sandbox/entrypoint.py``). A claimed
sandbox is its run's for good — it ends with the run — and ``fill`` starts another.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .backends.base import Handle, WarmBackend
from .layout import RunLayout
from .spec import Egress, Prepared

__all__ = ["WarmPool", "Shape", "Slot", "SLOT_PREFIX"]

SLOT_PREFIX = "warm-"
_TOKEN_HEX = 16  # the random part of a slot's name, after its owner's


@dataclass(frozen=True)
class Shape:
    """What a waiting sandbox is started with: a run of another shape cannot use it."""

    repo_name: str
    objects: str  # the object store mounted read-only; "" for none
    egress: Egress
    # the run environment's settings the CLI started ahead inherits (model names and switches — the allow-list of
    # service/control/runenv.py, never a key): a run whose settings differ would find a CLI spawned with other ones
    settings: tuple[tuple[str, str], ...] = ()
    # the team's prepared environment its sandbox runs in (``sandbox.prepare``); ``image`` names it in comparisons
    environment: Prepared | None = field(default=None, compare=False, hash=False)
    image: str = ""

    @classmethod
    def of(cls, repo_name: str, objects: str, egress: Egress, settings: tuple[tuple[str, str], ...],
           environment: Prepared | None = None) -> Shape:
        return cls(repo_name, objects, egress, settings, environment,
                   environment.image if environment is not None else "")


@dataclass(frozen=True)
class Slot:
    folder: str
    handle: Handle
    shape: Shape

    def layout(self, root: Path, run_id: str) -> RunLayout:
        """The layout of the run that claimed this slot."""
        return RunLayout(root, run_id, self.shape.repo_name, folder=self.folder)


class WarmPool:
    """Keeps ``size`` waiting sandboxes of every shape it was asked for (``want``) under ``root``.

    Thread-safe: ``fill`` (slow: it starts sandboxes) runs in a worker thread while runs claim slots.
    ``on_error(shape, error)`` hears of a sandbox that could not be started; the shape is tried again at the
    next ``fill``. ``owner`` (a few hex digits) starts the name of every slot this pool makes, and ``sweep`` takes
    only those: several pools (a service's replicas) on one folder leave each other's waiting sandboxes alone —
    until their owner is gone (``reap``).
    """

    def __init__(self, backend: WarmBackend, root: str | Path, size: int, *,
                 on_error: Callable[[Shape, BaseException], None] | None = None, owner: str = "") -> None:
        if not isinstance(backend, WarmBackend):
            raise TypeError(f"{type(backend).__name__} cannot start sandboxes ahead of their runs")
        if not all(c in "0123456789abcdef" for c in owner) or len(owner) > 16:
            raise ValueError(f"a warm pool's owner is up to 16 hex digits, not {owner!r}")
        self.backend, self.root, self.size = backend, Path(root).resolve(), size
        self.owner = owner
        self.prefix = SLOT_PREFIX + owner
        self.on_error = on_error
        self._lock = threading.Lock()
        self._filling = threading.Lock()
        self._slots: dict[Shape, list[Slot]] = {}
        self._closed = False

    def want(self, shape: Shape) -> None:
        with self._lock:
            self._slots.setdefault(shape, [])

    def retain(self, shapes: set[Shape]) -> None:
        """Want exactly ``shapes`` from now on: the waiting sandboxes of every other shape are discarded."""
        with self._lock:
            gone = [s for shape, group in self._slots.items() if shape not in shapes for s in group]
            self._slots = {shape: self._slots.get(shape, []) for shape in shapes}
        for slot in gone:
            self.discard(slot)

    def waiting(self) -> dict[Shape, int]:
        with self._lock:
            return {shape: len(slots) for shape, slots in self._slots.items()}

    def claim(self, shape: Shape) -> Slot | None:
        """A waiting sandbox of ``shape``, now the caller's (None when there is none: start the run cold).
        The shape is wanted from now on."""
        while True:
            with self._lock:
                slots = self._slots.setdefault(shape, [])
                if not slots:
                    return None
                slot = slots.pop(0)
            if self.backend.state(slot.handle) == "running":
                return slot
            self.discard(slot)  # it died while waiting (killed, out of memory, the engine restarted)

    def fill(self, *, yield_to: Callable[[], bool] | None = None) -> int:
        """Blocking: top every wanted shape up to ``size`` (a waiting sandbox that died is replaced); how many
        sandboxes were started. One fill at a time. ``yield_to()``, asked before each start, True: stop here — the
        CPU is better spent on what is starting now (runs of a burst) than on sandboxes for later ones."""
        started = 0
        with self._filling:
            if self._closed:
                return 0
            self._prune()
            for shape in list(self.waiting()):
                while self.waiting().get(shape, 0) < self.size:
                    if yield_to is not None and yield_to():
                        return started
                    try:
                        slot = self._start(shape)
                    except Exception as e:  # noqa: BLE001 - a failed start is reported, the pool goes on
                        if self.on_error is not None:
                            self.on_error(shape, e)
                        break
                    with self._lock:
                        self._slots.setdefault(shape, []).append(slot)
                    started += 1
        return started

    def _prune(self) -> None:
        with self._lock:
            slots = [s for group in self._slots.values() for s in group]
        for slot in slots:
            if self.backend.state(slot.handle) != "running":
                with self._lock:
                    group = self._slots.get(slot.shape, [])
                    if slot not in group:
                        continue  # claimed meanwhile
                    group.remove(slot)
                self.discard(slot)

    def discard(self, slot: Slot) -> None:
        """The slot's sandbox and folder go (a slot not claimed, or one whose claim failed half-way)."""
        try:
            self.backend.remove(slot.handle)
        finally:
            shutil.rmtree(self.root / slot.folder, ignore_errors=True)

    def close(self) -> None:
        """Discard every waiting slot and start no more (the service stops: a waiting sandbox holds memory and
        nothing else). Waits for a fill in progress, which would otherwise add one after."""
        self._closed = True
        with self._filling, self._lock:
            slots = [s for group in self._slots.values() for s in group]
            for group in self._slots.values():
                group.clear()
        for slot in slots:
            self.discard(slot)

    def sweep(self, keep: Callable[[str], bool]) -> int:
        """At start: remove the waiting sandboxes a previous pool of this owner left (their image or settings may be
        old) and the slot folders nobody claimed — every one of its folders but those ``keep(folder)`` (a run
        owns)."""
        removed = 0
        held = {s.folder for group in self._slots.values() for s in group}
        for folder, handle in self.backend.slots().items():
            if folder.parent == self.root and folder.name.startswith(self.prefix) and folder.name not in held:
                self.backend.remove(handle)
                removed += 1
        if self.root.is_dir():
            for d in self.root.glob(f"{self.prefix}*"):
                if d.name not in held and not keep(d.name):
                    shutil.rmtree(d, ignore_errors=True)
        return removed

    def reap(self, alive: Callable[[str], bool], keep: Callable[[str], bool]) -> int:
        """Remove what pools of other owners that are gone left waiting — a replica that died (SIGKILL, a lost node)
        leaves its waiting sandboxes running, and no sweep of anyone else's takes them: their sandboxes, and their
        slot folders but those ``keep(folder)`` (a run owns). ``alive(owner)`` is asked once per other owner found;
        how many sandboxes were removed. A pool without an owner (the only one on its folder) reaps nothing."""
        if not self.owner:
            return 0
        verdicts: dict[str, bool] = {}

        def gone(name: str) -> bool:
            other = self._owner_of(name)
            if other is None:
                return False
            if other not in verdicts:
                verdicts[other] = not alive(other)
            return verdicts[other]

        removed = 0
        for folder, handle in self.backend.slots().items():
            if folder.parent == self.root and gone(folder.name):
                self.backend.remove(handle)
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        if self.root.is_dir():
            for d in self.root.glob(f"{SLOT_PREFIX}*"):
                if not keep(d.name) and gone(d.name):
                    shutil.rmtree(d, ignore_errors=True)
        return removed

    def _owner_of(self, name: str) -> str | None:
        """The owner of another pool's slot named ``name`` (owners on one folder are all as long), else None."""
        rest = name[len(SLOT_PREFIX):]
        other = rest[:len(self.owner)]
        if not name.startswith(SLOT_PREFIX) or len(rest) != len(self.owner) + _TOKEN_HEX or other == self.owner:
            return None
        return other if all(c in "0123456789abcdef" for c in rest) else None

    def _start(self, shape: Shape) -> Slot:
        folder = self.prefix + secrets.token_hex(_TOKEN_HEX // 2)
        layout = RunLayout(self.root, folder, shape.repo_name).ensure()
        try:
            layout.workspace.mkdir(mode=0o700)  # the claim makes (or moves) the run's checkout in it
            self._checkout(shape, layout)
            layout.gateway.mkdir(mode=0o755)  # empty: the claim opens the run's gateway socket in it
            os.chmod(layout.gateway, 0o755)  # whatever the umask: the waiting runner opens its bridge on it ahead
            handle = self.backend.warm(layout, objects=Path(shape.objects) if shape.objects else None,
                                       egress=shape.egress, settings=dict(shape.settings),
                                       environment=shape.environment)
        except BaseException:
            shutil.rmtree(layout.dir, ignore_errors=True)
            raise
        return Slot(folder, handle, shape)

    @staticmethod
    def _checkout(shape: Shape, layout: RunLayout) -> None:
        """The repository's HEAD checked out ahead, so the sandbox can start its run's CLI in it; a repository
        that cannot be checked out leaves the folder empty (the sandbox then waits without a CLI)."""
        from .worktree import WorktreeError, checkout_ahead

        if not shape.objects:
            return
        try:
            checkout_ahead(shape.objects, layout.workspace)
        except WorktreeError:
            layout.workspace.mkdir(mode=0o700, exist_ok=True)

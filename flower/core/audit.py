"""Audit events: every guard denial, spill and isolation injection is observable.

The guards run inside the SDK's hook callbacks, far from whoever wants to know
(the service's structured audit log, a test). They `emit`; anyone may `listen`.
Process-global on purpose: hooks are built once and shared by every session, so
a per-run object would have to be threaded through every guard factory.
A listener that raises is dropped for that event, never allowed to break a hook.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AuditEvent", "emit", "listen", "add_listener", "remove_listener"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuditEvent:
    """One thing a guard did; `fields` say the rest.

    kinds: "deny" (field `guard` names which wall: whitelist, delegate, foreground,
    isolation), "spill", "spill_failed" (the result stayed in context), "isolate".
    Fields, as far as the hook input carries them: role, tool, reason (deny),
    path and size (spill), session_id, agent_id (None on the main thread).
    """

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "at": self.at, **self.fields}


Listener = Callable[[AuditEvent], None]

_lock = threading.Lock()
_listeners: tuple[Listener, ...] = ()  # copy-on-write: emit reads without the lock


def add_listener(fn: Listener) -> None:
    global _listeners
    with _lock:
        _listeners = (*_listeners, fn)


def remove_listener(fn: Listener) -> None:
    """Remove one registration of `fn`; unknown listeners are ignored."""
    global _listeners
    with _lock:
        items = list(_listeners)
        if fn in items:
            items.remove(fn)
        _listeners = tuple(items)


@contextmanager
def listen(fn: Listener) -> Iterator[Listener]:
    """Subscribe for the duration of a `with` block."""
    add_listener(fn)
    try:
        yield fn
    finally:
        remove_listener(fn)


def emit(kind: str, **fields: Any) -> AuditEvent:
    """Tell every listener; a listener's failure is logged and swallowed."""
    event = AuditEvent(kind, fields)
    for fn in _listeners:
        try:
            fn(event)
        except Exception:  # noqa: BLE001 - a broken listener must not break a hook
            _log.exception("audit listener %r failed on %s", fn, kind)
    return event

"""Session store: SQLite persistence; trimming, expiry and pruning when a session is resumed.

The reshaping is composed, not inherited: passes (``Expire``, ``Trim``, ``Prune`` — functions
of one transcript that report what they did) run in order over what ``load()`` returns, and
``ReshapingSessionStore(inner, passes)`` puts them on any SessionStore. The reference's names
are constructors over that one decorator: ``TrimmingSessionStore`` = a ``SqliteSessionStore``
with ``[Expire, Trim]``, ``PruningSessionStore`` = the same plus ``Prune`` (what ``Runtime``
uses). Reshaping happens in ``load()`` only, on a copy: the rows never change.
"""

from flower.store.ephemeral import EphemeralPolicy, is_ephemeral
from flower.store.prune import Prune, PrunePolicy, PruningSessionStore
from flower.store.reshape import Pass, ReshapingSessionStore, run_passes
from flower.store.sqlite import SqliteSessionStore
from flower.store.trim import Expire, Trim, TrimmingSessionStore, TrimPolicy, trim_report

__all__ = [
    "Expire",
    "Pass",
    "Prune",
    "ReshapingSessionStore",
    "Trim",
    "run_passes",
    "EphemeralPolicy",
    "PrunePolicy",
    "PruningSessionStore",
    "SqliteSessionStore",
    "TrimPolicy",
    "TrimmingSessionStore",
    "is_ephemeral",
    "trim_report",
]

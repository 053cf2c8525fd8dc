"""Session store: SQLite persistence; trimming, expiry and pruning when a session is resumed.

Three levels, each adding one concern: ``SqliteSessionStore`` (persist) ←
``TrimmingSessionStore`` (spill old bulk, expire stale ephemeral results) ←
``PruningSessionStore`` (drop old denials and API errors, neutralize interrupt residue,
heal orphan calls). ``Runtime`` uses the outermost. Reshaping happens in ``load()`` only,
on a copy: the rows never change.
"""

from flower.store.ephemeral import EphemeralPolicy, is_ephemeral
from flower.store.prune import PrunePolicy, PruningSessionStore
from flower.store.sqlite import SqliteSessionStore
from flower.store.trim import TrimmingSessionStore, TrimPolicy, trim_report

__all__ = [
    "EphemeralPolicy",
    "PrunePolicy",
    "PruningSessionStore",
    "SqliteSessionStore",
    "TrimPolicy",
    "TrimmingSessionStore",
    "is_ephemeral",
    "trim_report",
]

"""Session store: SQLite persistence, trimming and expiry on resume, pruning of denied calls.

Three levels, each adding one concern: ``SqliteSessionStore`` (persist) ←
``TrimmingSessionStore`` (spill bulk, expire stale ephemeral results) ←
``PruningSessionStore`` (drop old denied/errored calls). ``Runtime`` uses the outermost.
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

"""Session store: SQLite persistence, trimming on resume, pruning of denied calls."""

from flower.store.ephemeral import EphemeralPolicy, is_ephemeral

__all__ = ["EphemeralPolicy", "is_ephemeral"]

"""Pruning on resume: old denied or failed tool calls leave the replayed conversation.

A guard denial or a failed call is useful once — the model reads it and changes course.
Replayed on every resume it is noise that also invites the model to retry the same thing.
So, after trimming, ``load()`` drops every errored exchange (``tool_result`` with
``is_error: true``, hook denials included) except the newest ``keep_denials``.

Keeping the transcript valid for the API and the CLI:

* the ``tool_use`` block and its ``tool_result`` go together (Claude Code writes one
  content block per entry; an entry left with no content is dropped);
* meta entries tied to the call (``sourceToolUseID`` / ``attachment.toolUseID`` /
  progress ``toolUseID``) go with it;
* every ``parentUuid`` (and ``logicalParentUuid``, ``leafUuid``, ``sourceToolAssistantUUID``)
  that pointed at a dropped entry is re-pointed at its nearest kept ancestor, so the
  uuid chain stays a chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flower.store.ephemeral import EphemeralPolicy
from flower.store.trim import Entry, TranscriptIndex, TrimmingSessionStore, TrimPolicy

__all__ = ["PrunePolicy", "PruningSessionStore"]

_RARE_LINKS = ("logicalParentUuid", "leafUuid", "sourceToolAssistantUUID")
_PLAIN_KINDS = frozenset({"assistant", "attachment", "progress"})  # carry parentUuid only


@dataclass
class PrunePolicy:
    """How many errored tool exchanges (the newest) survive a resume."""

    keep_denials: int = 1


class PruningSessionStore(TrimmingSessionStore):
    """``TrimmingSessionStore`` that also prunes old denied/errored tool calls at ``load()``.

    The policy is ``prune_policy`` (``prune`` is the method); ``last_report["pruned"]``
    counts the exchanges dropped by the latest load.
    """

    def __init__(
        self,
        path: str | Path,
        workspace: str | Path,
        policy: TrimPolicy | None = None,
        ephemeral: EphemeralPolicy | None = None,
        prune: PrunePolicy | None = None,
    ) -> None:
        super().__init__(path, workspace, policy, ephemeral)
        self.prune_policy = prune if prune is not None else PrunePolicy()
        if self.prune_policy.keep_denials < 0:
            raise ValueError(
                f"PrunePolicy.keep_denials={self.prune_policy.keep_denials} is negative; use 0 to drop them all."
            )

    def _apply(self, entries: list[Entry], ix: TranscriptIndex) -> list[Entry]:
        # after expiry and trimming, which edit blocks in place and keep the index valid
        return self.prune(super()._apply(entries, ix), ix)

    def prune(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> list[Entry]:
        """Drop errored exchanges beyond the newest ``keep_denials``; re-link the uuid chain.

        Returns a new list; the kept entries are edited in place.
        """
        ix = ix or TranscriptIndex(entries)
        errored = list(dict.fromkeys(
            b["tool_use_id"] for _, b in ix.results
            if b.get("is_error") is True and isinstance(b.get("tool_use_id"), str) and b["tool_use_id"] in ix.uses
        ))
        drop = set(errored[: max(0, len(errored) - self.prune_policy.keep_denials)])
        if not drop:
            return entries

        gone: set[int] = set()
        for i, b in ix.results:
            tid = b.get("tool_use_id")
            if isinstance(tid, str) and tid in drop and _remove_block(entries[i], b):
                gone.add(i)
        for tid in drop:
            i, b = ix.uses[tid]
            if _remove_block(entries[i], b):
                gone.add(i)
        gone.update(i for i, tid in ix.tied if tid in drop)

        parent_of = {entries[i]["uuid"]: entries[i].get("parentUuid") for i in gone
                     if isinstance(entries[i].get("uuid"), str)}

        def resolve(u: str) -> Any:
            hops = 0
            while u in parent_of and hops <= len(parent_of):
                u, hops = parent_of[u], hops + 1
            return u

        kept = [e for i, e in enumerate(entries) if i not in gone]
        for e in kept:
            parent = e.get("parentUuid")
            if isinstance(parent, str) and parent in parent_of:
                e["parentUuid"] = resolve(parent)
            if e.get("type") not in _PLAIN_KINDS:  # the rarer links: last-prompt, user, system entries
                for f in _RARE_LINKS:
                    v = e.get(f)
                    if isinstance(v, str) and v in parent_of:
                        e[f] = resolve(v)
        self._count("pruned", len(drop))
        return kept


def _remove_block(entry: Entry, block: dict[str, Any]) -> bool:
    """Take ``block`` out of the entry's content; True when the entry is left empty."""
    content = entry["message"]["content"]
    entry["message"]["content"] = left = [b for b in content if b is not block]
    return not left

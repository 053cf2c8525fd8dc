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

from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from flower.store.ephemeral import EphemeralPolicy
from flower.store.trim import Entry, TrimmingSessionStore, TrimPolicy, tool_uses

__all__ = ["PrunePolicy", "PruningSessionStore"]

_LINK_FIELDS = ("parentUuid", "logicalParentUuid", "leafUuid", "sourceToolAssistantUUID")


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

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        entries = await super().load(key)
        if not entries:
            return entries
        return self.prune(entries)  # type: ignore[arg-type, return-value]

    def prune(self, entries: list[Entry]) -> list[Entry]:
        """Drop errored exchanges beyond the newest ``keep_denials``; re-link the uuid chain."""
        uses = tool_uses(entries)
        errored: list[str] = []
        for e in entries:
            if e.get("type") != "user" or e.get("isCompactSummary"):
                continue
            for b in _content_list(e):
                tid = b.get("tool_use_id")
                if b.get("type") == "tool_result" and b.get("is_error") is True and isinstance(tid, str) and tid in uses:
                    errored.append(b["tool_use_id"])
        errored = list(dict.fromkeys(errored))
        keep = self.prune_policy.keep_denials
        drop = set(errored[: max(0, len(errored) - keep)])
        if not drop:
            return entries

        parent_of: dict[str, Any] = {}
        kept: list[Entry] = []
        for e in entries:
            if _drop_blocks(e, drop) or _tied_to(e, drop):
                if isinstance(e.get("uuid"), str):
                    parent_of[e["uuid"]] = e.get("parentUuid")
                continue
            kept.append(e)

        def resolve(u: Any) -> Any:
            seen = 0
            while u in parent_of and seen <= len(parent_of):
                u, seen = parent_of[u], seen + 1
            return u

        for e in kept:
            for f in _LINK_FIELDS:
                if isinstance(e.get(f), str) and e[f] in parent_of:
                    e[f] = resolve(e[f])
        self._count("pruned", len(drop))
        return kept


def _content_list(entry: Entry) -> list[dict[str, Any]]:
    msg = entry.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _drop_blocks(entry: Entry, drop: set[str]) -> bool:
    """Remove the dropped calls' blocks from ``entry``; True when nothing is left of it."""
    kind = entry.get("type")
    if kind not in ("user", "assistant") or entry.get("isCompactSummary"):
        return False
    msg = entry.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(content, list):
        return False

    def dropped(b: Any) -> bool:
        if not isinstance(b, dict):
            return False
        if kind == "assistant":
            return b.get("type") == "tool_use" and isinstance(b.get("id"), str) and b["id"] in drop
        tid = b.get("tool_use_id")
        return b.get("type") == "tool_result" and isinstance(tid, str) and tid in drop

    left = [b for b in content if not dropped(b)]
    if len(left) == len(content):
        return False
    msg["content"] = left
    return not left


def _tied_to(entry: Entry, drop: set[str]) -> bool:
    """Meta entries that only make sense next to a dropped call."""
    att = entry.get("attachment")
    ids = (entry.get("sourceToolUseID"), entry.get("toolUseID"), att.get("toolUseID") if isinstance(att, dict) else None)
    return any(isinstance(i, str) and i in drop for i in ids)

"""Pruning on resume: what is an error, not a fact, leaves (or is mended in) the replayed conversation.

After expiry and trimming, ``load()`` runs ``prune()``, which does four things to the copy
(the rows in SQLite never change):

1. **Old denied calls go** (``keep_denials``): a denied call never ran, its result holds
   no information, and replayed it misleads — a coordinator that reads a few "do not use
   Bash" stops trying even the ``git status`` it is allowed. The newest ``keep_denials``
   stay so the model does not retry the same denied call within the turn. The ``tool_use``
   block and its ``tool_result`` leave together; only the hit block leaves when a message
   holds several.
2. **Synthetic API error messages go** (``drop_api_errors``): the residue of a dropped
   connection or an exhausted retry, not something the model said.
3. **Interrupt residue is neutralized** (``neutralize_interrupts``): the body of a result the
   CLI wrote for an interrupted call ("STOP what you are doing and wait for the user…")
   becomes ``interrupt_text``; the entry stays.
4. **Orphan calls are healed** (``heal_orphans``): a ``tool_use`` with no ``tool_result``
   (the process stopped between the two) gets a synthetic result entry with
   ``orphan_text``, inserted right after the assistant message; otherwise every resume of
   that session may fail with a 400. Completing is safer than removing: the message may
   also hold text and thinking.

Recognized by the structure the bundled CLI (2.1.x) writes, never by the wording:

* a denial is a ``user`` result entry with ``toolDenialKind == "permission-rule"`` (PreToolUse
  hook deny, settings deny rule, ``can_use_tool`` deny) or any other ``toolDenialKind`` whose
  ``permissionDecision.decision == "reject"`` (e.g. ``user-rejected`` "…you haven't granted
  it yet" when nobody can approve). Kept anyway: ``toolDenialAfterRun`` (the call did run)
  and ``holdsPersonsWords`` (the text may be what a person said);
* interrupt residue is ``toolDenialKind == "interrupted"`` (the CLI's own stand-in for a call
  cut off by the end of a session) or ``"user-rejected"`` with no ``permissionDecision``
  (a call stopped while running by an interrupt: no permission was involved);
* an API error is an ``assistant`` entry with ``isApiErrorMessage`` (or model ``<synthetic>`` and an
  ``error``); the CLI's other synthetic placeholder ("No response requested.") stays.

The transcript is a chain by ``parentUuid``: every link (``parentUuid``, ``logicalParentUuid``,
``leafUuid``, ``sourceToolAssistantUUID``) that pointed at a removed entry is re-pointed at
its nearest kept ancestor. The relinking works on the full list, removed entries included.
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flower.core.errors import ConfigError
from flower.store.ephemeral import EphemeralPolicy
from flower.store.reshape import Pass, Report
from flower.store.transcript import Entry, TranscriptIndex, _content
from flower.store.trim import TrimmingSessionStore, TrimPolicy

__all__ = ["Prune", "PrunePolicy", "PruningSessionStore", "heal_orphans", "is_api_error", "is_denial",
           "is_interrupt_residue", "neutralize_interrupts", "prune"]

_RARE_LINKS = ("logicalParentUuid", "leafUuid", "sourceToolAssistantUUID")  # besides parentUuid
_COPIED = ("isSidechain", "userType", "entrypoint", "cwd", "sessionId", "version", "gitBranch", "agentId",
           "slug", "timestamp")
_HEAL_NS = uuidlib.UUID("6f1d2c1e-6c1a-4f0b-9a51-0f7e3a2b8c4d")


@dataclass
class PrunePolicy:
    """What ``PruningSessionStore`` removes or mends on resume. Texts are model-facing."""

    drop_api_errors: bool = True
    neutralize_interrupts: bool = True
    interrupt_text: str = "[上一轮在此处被中断,该工具结果未产生]"
    heal_orphans: bool = True
    orphan_text: str = "[这一步被打断了,没有结果。需要的话重做。]"
    keep_denials: int = 1


def is_denial(entry: Entry) -> bool:
    """A result entry for a call the harness refused before it ran (see the module doc)."""
    if entry.get("type") != "user" or entry.get("toolDenialAfterRun") is True or entry.get("holdsPersonsWords") is True:
        return False
    kind = entry.get("toolDenialKind")
    if kind == "permission-rule":
        return True
    decision = entry.get("permissionDecision")
    return kind is not None and kind != "interrupted" and isinstance(decision, dict) \
        and decision.get("decision") == "reject"


def is_interrupt_residue(entry: Entry) -> bool:
    """A result entry the CLI wrote for a call an interrupt (or the end of a session) cut off."""
    if entry.get("type") != "user":
        return False
    kind = entry.get("toolDenialKind")
    return kind == "interrupted" or (kind == "user-rejected" and "permissionDecision" not in entry)


def is_api_error(entry: Entry) -> bool:
    """A synthetic assistant message standing for a failed API call (no tool call in it).

    ``isApiErrorMessage``, or model ``<synthetic>`` with an ``error``. Other synthetic
    placeholders (the CLI's "No response requested.") are not errors and stay.
    """
    if entry.get("type") != "assistant":
        return False
    msg = entry.get("message")
    if not isinstance(msg, dict):
        return False
    if not (entry.get("isApiErrorMessage") is True or (msg.get("model") == "<synthetic>" and entry.get("error"))):
        return False
    content = msg.get("content")
    return not (isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_use"
                                                  for b in content))


# ---------------------------------------------------------------------------
# The pass: functions of one transcript
# ---------------------------------------------------------------------------

_COUNTS = ("pruned", "denials_dropped", "api_errors_dropped", "interrupts_neutralized", "orphans_healed")


def prune(entries: list[Entry], ix: TranscriptIndex, policy: PrunePolicy) -> tuple[list[Entry], Report]:
    """Heal orphans, neutralize interrupt residue, drop old denials and API errors; relink.

    Returns the entries to go on with (a new list when any were removed or inserted; kept
    entries are edited in place) and the counts: ``pruned`` = entries removed,
    ``denials_dropped`` = denied calls removed, ``api_errors_dropped``,
    ``interrupts_neutralized``, ``orphans_healed``.
    """
    report: Report = dict.fromkeys(_COUNTS, 0)
    if policy.heal_orphans:
        healed, report["orphans_healed"] = heal_orphans(entries, ix, policy)
        if healed is not entries:
            entries, ix = healed, TranscriptIndex(healed)
    if policy.neutralize_interrupts:
        report["interrupts_neutralized"] = neutralize_interrupts(entries, ix, policy)

    gone: set[int] = set()
    if policy.drop_api_errors:
        errors = [i for i in ix.failed if is_api_error(entries[i])]
        gone.update(errors)
        report["api_errors_dropped"] = len(errors)
    drop = _old_denials(entries, ix, policy.keep_denials)
    if drop:
        for i, b in ix.results:
            if b.get("tool_use_id") in drop and _remove_block(entries[i], b):
                gone.add(i)
        for tid in drop:
            i, b = ix.uses[tid]
            if _remove_block(entries[i], b):
                gone.add(i)
        gone.update(i for i, tid in ix.tied if tid in drop)
        report["denials_dropped"] = len(drop)
    if not gone:
        return entries, report
    report["pruned"] = len(gone)
    return _relink(entries, gone), report


def _old_denials(entries: list[Entry], ix: TranscriptIndex, keep: int) -> set[str]:
    """Ids of the denied calls beyond the newest ``keep`` (only calls whose use is here)."""
    denied = list(dict.fromkeys(
        b["tool_use_id"] for i, b in ix.results
        if i in ix.marked and isinstance(b.get("tool_use_id"), str) and b["tool_use_id"] in ix.uses
        and is_denial(entries[i])
    ))
    return set(denied[: max(0, len(denied) - keep)])


def neutralize_interrupts(entries: list[Entry], ix: TranscriptIndex, policy: PrunePolicy) -> int:
    """Replace the body of interrupt residue results by ``policy.interrupt_text``; returns how many."""
    n = 0
    marked = ix.marked
    for i, block in ix.results:
        if i in marked and is_interrupt_residue(entries[i]):
            block["content"] = policy.interrupt_text
            n += 1
    return n


def heal_orphans(entries: list[Entry], ix: TranscriptIndex, policy: PrunePolicy) -> tuple[list[Entry], int]:
    """Give every ``tool_use`` without a ``tool_result`` a synthetic result entry; returns (entries, how many).

    Each is inserted right after the assistant message holding the call (Claude Code
    writes one entry per content block, so "the message" is the run of entries
    sharing its ``message.id``); the entries that hung off that message's last entry
    now hang off the inserted one. Returns ``entries`` itself when nothing is orphaned.
    """
    answered = {b.get("tool_use_id") for _, b in ix.results}
    orphans = [(i, tid) for tid, (i, _) in ix.uses.items() if tid not in answered]
    if orphans:  # rare: confirm against every user entry, meta ones included
        answered = {b.get("tool_use_id") for e in entries if e.get("type") == "user"
                    and isinstance(c := _content(e), list)
                    for b in c if isinstance(b, dict) and b.get("type") == "tool_result"}
        orphans = [(i, tid) for i, tid in orphans if tid not in answered]
    if not orphans:
        return entries, 0
    last_of: dict[Any, int] = {}  # message id -> index of the message's last entry
    for i, e in enumerate(entries):
        if e.get("type") == "assistant" and isinstance(e.get("message"), dict):
            last_of[e["message"].get("id") or e.get("uuid")] = i
    after: dict[int, list[Entry]] = {}  # index of a message's last entry -> result entries to insert
    for i, tid in sorted(orphans):
        holder = entries[i]
        end = last_of.get(holder["message"].get("id") or holder.get("uuid"), i)
        chain = after.setdefault(end, [])
        parent = chain[-1]["uuid"] if chain else entries[end].get("uuid")
        chain.append(_orphan_result(holder, tid, parent, policy.orphan_text))
    repoint: dict[str, str] = {}
    for end, chain in after.items():
        tail = entries[end].get("uuid")
        if isinstance(tail, str):
            repoint[tail] = chain[-1]["uuid"]
    out: list[Entry] = []
    for i, e in enumerate(entries):
        for f in ("parentUuid", "leafUuid"):
            v = e.get(f)
            if isinstance(v, str) and v in repoint:
                e[f] = repoint[v]
        out.append(e)
        if i in after:
            out.extend(after[i])
    return out, len(orphans)


def _orphan_result(holder: Entry, tool_use_id: str, parent: Any, text: str) -> Entry:
    sid = holder.get("sessionId", "")
    entry: Entry = {k: holder[k] for k in _COPIED if k in holder}
    entry.update({
        "type": "user",
        "parentUuid": parent,
        "uuid": str(uuidlib.uuid5(_HEAL_NS, f"{sid}/{tool_use_id}")),
        "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": True}]},
        "toolUseResult": text,
        "sourceToolAssistantUUID": holder.get("uuid"),
    })
    return entry


@dataclass(frozen=True)
class Prune:
    """The pruning pass (``PrunePolicy``), for ``ReshapingSessionStore``."""

    policy: PrunePolicy
    name: str = "prune"

    def __call__(self, entries: list[Entry], ix: TranscriptIndex) -> tuple[list[Entry], Report]:
        return prune(entries, ix, self.policy)


# ---------------------------------------------------------------------------
# The store of the reference: the trimming store plus pruning
# ---------------------------------------------------------------------------


class _Count:
    """A count of the latest load's pruning report, read as an attribute (``store.pruned``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, store: PruningSessionStore | None, owner: type) -> int:
        return store.reports.get("prune", {}).get(self.name, 0) if store is not None else 0


class PruningSessionStore(TrimmingSessionStore):
    """``ReshapingSessionStore(SqliteSessionStore(path), [Expire, Trim, Prune])``: the ``Runtime``'s store.

    ``prune`` and ``ephemeral`` are keyword-only: given by position, a ``PrunePolicy`` would land
    where ``TrimmingSessionStore`` takes its ``EphemeralPolicy``. The policy is ``prune_policy``
    (``prune`` is the method); assigning it rebuilds the passes. After each ``load()``:
    ``pruned`` = entries removed from the replayed transcript, ``denials_dropped`` = denied calls
    removed; also ``api_errors_dropped``, ``interrupts_neutralized``, ``orphans_healed`` — read from
    that load's report.
    """

    def __init__(
        self,
        path: str | Path,
        workspace: str | Path,
        policy: TrimPolicy | None = None,
        *,
        prune: PrunePolicy | None = None,
        ephemeral: EphemeralPolicy | None = None,
    ) -> None:
        self._prune_policy = self._checked(prune if prune is not None else PrunePolicy())
        super().__init__(path, workspace, policy, ephemeral)

    @property
    def prune_policy(self) -> PrunePolicy:
        return self._prune_policy

    @prune_policy.setter
    def prune_policy(self, value: PrunePolicy) -> None:
        self._prune_policy = self._checked(value)
        self._rebuild()

    @staticmethod
    def _checked(policy: PrunePolicy) -> PrunePolicy:
        if policy.keep_denials < 0:
            raise ConfigError(
                f"PrunePolicy.keep_denials={policy.keep_denials} is negative; use 0 to drop them all.",
                setting="PrunePolicy.keep_denials",
            )
        return policy

    def _passes(self) -> list[Pass]:
        # after expiry and trimming, which edit blocks in place and keep the index valid
        return [*super()._passes(), Prune(self.prune_policy)]

    pruned = _Count()
    denials_dropped = _Count()
    api_errors_dropped = _Count()
    interrupts_neutralized = _Count()
    orphans_healed = _Count()

    # -- the pass as methods, on a plain list (the counts read like after a load) -----------------
    def _note(self, **counts: int) -> None:
        self.reports = {**self.reports, "prune": {**self.reports.get("prune", {}), **counts}}

    def prune(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> list[Entry]:
        """``prune()`` with this store's policy; returns a new list (kept entries edited in place)."""
        out, report = prune(entries, ix or TranscriptIndex(entries), self.prune_policy)
        self.reports = {**self.reports, "prune": report}
        return out

    def neutralize_interrupts(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> int:
        n = neutralize_interrupts(entries, ix or TranscriptIndex(entries), self.prune_policy)
        self._note(interrupts_neutralized=n)
        return n

    def heal_orphans(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> list[Entry]:
        out, n = heal_orphans(entries, ix or TranscriptIndex(entries), self.prune_policy)
        self._note(orphans_healed=n)
        return out


def _remove_block(entry: Entry, block: dict[str, Any]) -> bool:
    """Take ``block`` out of the entry's content; True when the entry is left empty."""
    content = entry["message"]["content"]
    entry["message"]["content"] = left = [b for b in content if b is not block]
    return not left


def _relink(entries: list[Entry], gone: set[int]) -> list[Entry]:
    """Drop the entries at ``gone``; links to them move to their nearest kept ancestor.

    Takes the full list (removed entries included): the ancestors are read from it.
    """
    parent_of = {entries[i]["uuid"]: entries[i].get("parentUuid") for i in gone
                 if isinstance(entries[i].get("uuid"), str)}

    def resolve(u: Any) -> Any:
        hops = 0
        while u in parent_of and hops <= len(parent_of):
            u, hops = parent_of[u], hops + 1
        return u

    kept = [e for i, e in enumerate(entries) if i not in gone]
    if parent_of:
        for e in kept:
            v = e.get("parentUuid")
            if v in parent_of:
                e["parentUuid"] = resolve(v)
            for f in _RARE_LINKS:
                if f in e and e[f] in parent_of:
                    e[f] = resolve(e[f])
    return kept

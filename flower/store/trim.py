"""Trimming on resume: what a resumed conversation sends back to the model, made lean.

A long run resumed from the store would otherwise replay every old tool output in full.
At ``load()`` — and only there — two passes reshape a *copy* of the transcript (the rows
in SQLite never change):

* ``expire()``: Bash results of ephemeral commands (``is_ephemeral``) older than
  ``EphemeralPolicy.keep_recent`` turns are replaced by a short notice. Dropped, not
  spilled: a stale ``git status`` is wrong, not merely long.
* ``trim()``: outside the last ``TrimPolicy.keep_recent`` turns, text longer than
  ``min_chars`` (tool results, assistant text, string fields of tool inputs) is written
  to ``<workspace>/<spill_dirname>/<sha256[:16]>.txt`` and replaced by a pointer line
  plus a short head, so the model can still ``Read`` it.

Invariants the API imposes: a ``tool_result`` block is never removed, only its content
changes (else "Missing Tool Result Block"); image/document and thinking blocks are never
touched; ``isCompactSummary`` entries are left whole. User prompts are left whole too:
they are the task.

A *turn* starts at each user prompt entry: ``type == "user"`` whose content is not a
tool result and that is neither ``isMeta`` nor ``isCompactSummary``. An entry's *age* is
the number of prompts after it (0 for the turn in progress); "the last N turns" are the
entries with age < N.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from flower.store.ephemeral import EphemeralPolicy, is_ephemeral
from flower.store.sqlite import SqliteSessionStore, _gc_paused

__all__ = ["TranscriptIndex", "TrimPolicy", "TrimmingSessionStore", "is_prompt", "trim_report", "turn_ages"]

Entry = dict[str, Any]

SPILL_POINTER = "[全文 {chars} 字符已转存到 {path},需要时用 Read 读取。以下为开头部分]"
CAP_NOTE = "[其余 {chars} 字符已丢弃(临时状态不转存),需要请重新执行]"
HEAD_CHARS = 300
CMD_CHARS = 80


@dataclass
class TrimPolicy:
    """Spill long old text to disk on resume. ``spill_dirname`` is relative to the workspace.

    Not the same directory as ``spill_guard``'s (``<workbench>/spill/``): that one trims
    at the moment a tool returns, this one at resume. Keep them apart on purpose.
    """

    keep_recent: int = 20
    min_chars: int = 2000
    spill_dirname: str = ".flower/spill"
    enabled: bool = True


# ---------------------------------------------------------------------------
# Transcript shape helpers (shared with prune.py)
# ---------------------------------------------------------------------------


def is_prompt(entry: Entry) -> bool:
    """A user prompt (a turn's start), as opposed to a tool result or injected meta text."""
    if entry.get("type") != "user" or entry.get("isMeta") or entry.get("isCompactSummary"):
        return False
    if "toolUseResult" in entry or "sourceToolAssistantUUID" in entry:
        return False
    msg = entry.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, str):
        return True
    if isinstance(content, list):
        return not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return False


def turn_ages(entries: list[Entry]) -> list[int]:
    """For each entry, how many prompts come after it."""
    ix = TranscriptIndex(entries)
    return [ix.age(i) for i in range(len(entries))]


def tool_uses(entries: list[Entry]) -> dict[str, dict[str, Any]]:
    """``tool_use`` blocks by id (Claude Code writes one block per assistant entry)."""
    return {k: b for k, (_, b) in TranscriptIndex(entries).uses.items()}


class TranscriptIndex:
    """One pass over a transcript: what expiry, trimming and pruning look at, found once.

    Blocks are referenced, not copied, so the passes edit the entries in place. Lists
    are in transcript order.
    """

    __slots__ = ("size", "prompts", "uses", "results", "assistant_blocks", "tied")

    def __init__(self, entries: list[Entry]) -> None:
        self.size = len(entries)
        self.prompts: list[int] = []  # entry indices of user prompts (turn starts)
        self.uses: dict[str, tuple[int, dict[str, Any]]] = {}  # tool_use id -> (entry index, block)
        self.results: list[tuple[int, dict[str, Any]]] = []  # (entry index, tool_result block)
        self.assistant_blocks: list[tuple[int, dict[str, Any]]] = []  # text and tool_use blocks
        self.tied: list[tuple[int, str]] = []  # entries that reference a tool call: (index, tool_use id)
        results, blocks, uses, tied = self.results, self.assistant_blocks, self.uses, self.tied
        for i, e in enumerate(entries):
            kind = e.get("type")
            if kind == "assistant" or kind == "user":
                msg = e.get("message")
                content = msg.get("content") if isinstance(msg, dict) else None
                if kind == "user":
                    if "toolUseResult" not in e and is_prompt(e):
                        self.prompts.append(i)
                    elif isinstance(content, list) and not e.get("isCompactSummary"):
                        for b in content:
                            if isinstance(b, dict) and b.get("type") == "tool_result":
                                results.append((i, b))
                elif isinstance(content, list):
                    for b in content:
                        bt = b.get("type") if isinstance(b, dict) else None
                        if bt == "text":
                            blocks.append((i, b))
                        elif bt == "tool_use" and isinstance(b.get("id"), str):
                            uses[b["id"]] = (i, b)
                            blocks.append((i, b))
            elif kind == "attachment" or kind == "progress":
                att = e.get("attachment")
                tid = e.get("toolUseID") or (att.get("toolUseID") if isinstance(att, dict) else None)
                if isinstance(tid, str):
                    tied.append((i, tid))
            if "sourceToolUseID" in e and isinstance(e["sourceToolUseID"], str):
                tied.append((i, e["sourceToolUseID"]))

    def age(self, i: int) -> int:
        """Prompts after entry ``i`` (0 for the turn in progress)."""
        return len(self.prompts) - bisect_right(self.prompts, i)

    def recent_from(self, keep: int) -> int:
        """Index of the first entry in the last ``keep`` turns (entries before it are older)."""
        if keep <= 0:
            return self.size
        if keep > len(self.prompts):
            return 0
        return self.prompts[len(self.prompts) - keep]


def _text_len(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return 0


def _map_text(content: Any, fn: Callable[[str], str]) -> Any:
    """Apply ``fn`` to a result's text (a string, or each text block); other blocks untouched."""
    if isinstance(content, str):
        return fn(content)
    if isinstance(content, list):
        out = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
                b = {**b, "text": fn(b["text"])}
            out.append(b)
        return out
    return content


def _short_cmd(cmd: str) -> str:
    line = cmd.strip().splitlines()[0] if cmd.strip() else cmd
    if len(line) > CMD_CHARS or line != cmd.strip():
        return line[:CMD_CHARS].rstrip() + "…"
    return line


# ---------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------


class TrimmingSessionStore(SqliteSessionStore):
    """``SqliteSessionStore`` whose ``load()`` expires stale ephemeral results and spills old bulk.

    ``last_report`` counts what the latest ``load()`` did (one key: the SDK loads the
    main transcript and each subagent transcript separately): ``expired``, ``capped``,
    ``spilled``, ``saved_chars`` (and ``pruned`` in the subclass).
    """

    def __init__(
        self,
        path: str | Path,
        workspace: str | Path,
        policy: TrimPolicy | None = None,
        ephemeral: EphemeralPolicy | None = None,
    ) -> None:
        super().__init__(path)
        self.workspace = Path(workspace)
        self.policy = policy if policy is not None else TrimPolicy()
        self.ephemeral = ephemeral if ephemeral is not None else EphemeralPolicy()
        self.last_report: dict[str, int] = {}
        self._spill_root = ""
        spill = Path(self.policy.spill_dirname)
        if spill.is_absolute() or ".." in spill.parts:
            raise ValueError(
                f"TrimPolicy.spill_dirname={self.policy.spill_dirname!r} must be a relative path inside the "
                "workspace; use something like '.flower/spill'."
            )

    @property
    def spill_dir(self) -> Path:
        """``<workspace>/<spill_dirname>``, absolute: the pointer lines name it for ``Read``."""
        return self.workspace.resolve() / self.policy.spill_dirname

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        entries = await super().load(key)
        self.last_report = {}
        if not entries:
            return entries
        return await anyio.to_thread.run_sync(self._reshape, entries)

    def _reshape(self, entries: list[Any]) -> list[Any]:
        with _gc_paused():
            return self._apply(entries, TranscriptIndex(entries))

    def _apply(self, entries: list[Entry], ix: TranscriptIndex) -> list[Entry]:
        """The load-time passes, in order; subclasses append theirs."""
        if self.ephemeral.enabled:
            entries = self.expire(entries, ix)
        if self.policy.enabled:
            entries = self.trim(entries, ix)
        return entries

    def _count(self, name: str, n: int = 1) -> None:
        self.last_report[name] = self.last_report.get(name, 0) + n

    # -- expiry -----------------------------------------------------------------
    def expire(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> list[Entry]:
        """Replace old ephemeral Bash results by ``ephemeral.text``; cap recent ones at ``max_chars``.

        Mutates and returns ``entries`` (``load`` passes fresh copies of the rows).
        """
        pol = self.ephemeral
        ix = ix or TranscriptIndex(entries)
        recent = ix.recent_from(pol.keep_recent)
        for i, block in ix.results:
            use = ix.uses.get(block.get("tool_use_id", ""))
            if use is None or use[1].get("name") != "Bash":
                continue
            inp = use[1].get("input")
            cmd = inp.get("command") if isinstance(inp, dict) else None
            if not isinstance(cmd, str) or not is_ephemeral(cmd):
                continue
            before = _text_len(block.get("content"))
            if i < recent:
                block["content"] = pol.text.format(cmd=_short_cmd(cmd), age=ix.age(i))
                self._count("expired")
                self._count("saved_chars", max(0, before - len(block["content"])))
            elif before > pol.max_chars:
                block["content"] = _map_text(block.get("content"), self._cap)
                self._count("capped")
                self._count("saved_chars", max(0, before - _text_len(block["content"])))
        return entries

    def _cap(self, text: str) -> str:
        limit = self.ephemeral.max_chars
        if len(text) <= limit:
            return text
        return text[:limit] + "\n" + CAP_NOTE.format(chars=len(text) - limit)

    # -- trimming ---------------------------------------------------------------
    def trim(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> list[Entry]:
        """Spill long text outside the last ``policy.keep_recent`` turns. Mutates and returns ``entries``."""
        ix = ix or TranscriptIndex(entries)
        recent, limit = ix.recent_from(self.policy.keep_recent), self.policy.min_chars
        self._spill_root = str(self.spill_dir)
        for i, block in ix.results:
            if i >= recent:
                break
            content = block.get("content")
            if _text_len(content) > limit:
                block["content"] = _map_text(content, self._spill)
        for i, block in ix.assistant_blocks:
            if i >= recent:
                break
            if block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str) and len(text) > limit:
                    block["text"] = self._spill(text)
            elif isinstance(inp := block.get("input"), dict):
                if any(isinstance(v, str) and len(v) > limit for v in inp.values()):
                    block["input"] = {k: self._spill(v) if isinstance(v, str) else v for k, v in inp.items()}
        return entries

    def _spill(self, text: str) -> str:
        """Write ``text`` once under its content hash; return the pointer line and a short head."""
        if len(text) <= self.policy.min_chars:
            return text
        data = text.encode("utf-8", "surrogatepass")
        root = self._spill_root
        path = os.path.join(root, hashlib.sha256(data).hexdigest()[:16] + ".txt")
        if not os.path.exists(path):  # content-addressed: an existing file already holds this text
            os.makedirs(root, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        out = SPILL_POINTER.format(chars=len(text), path=path) + "\n" + text[:HEAD_CHARS]
        self._count("spilled")
        self._count("saved_chars", max(0, len(text) - len(out)))
        return out


def trim_report(source: TrimmingSessionStore | Mapping[str, int]) -> str:
    """One human-readable line from a store's ``last_report`` (or such a dict), for logs and the CLI.

    ``"expired 3 · capped 1 · spilled 2 · pruned 1 · 41200 chars saved"``, or ``"nothing trimmed"``.
    """
    report = source.last_report if isinstance(source, TrimmingSessionStore) else source
    parts = [f"{name} {report[name]}" for name in ("expired", "capped", "spilled", "pruned") if report.get(name)]
    if report.get("saved_chars"):
        parts.append(f"{report['saved_chars']} chars saved")
    return " · ".join(parts) if parts else "nothing trimmed"

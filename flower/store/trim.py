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
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from flower.store.ephemeral import EphemeralPolicy, is_ephemeral
from flower.store.sqlite import SqliteSessionStore

__all__ = ["TrimPolicy", "TrimmingSessionStore", "trim_report", "is_prompt", "turn_ages"]

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


def _content(entry: Entry) -> Any:
    msg = entry.get("message")
    return msg.get("content") if isinstance(msg, dict) else None


def is_prompt(entry: Entry) -> bool:
    """A user prompt (a turn's start), as opposed to a tool result or injected meta text."""
    if entry.get("type") != "user" or entry.get("isMeta") or entry.get("isCompactSummary"):
        return False
    if "toolUseResult" in entry or "sourceToolAssistantUUID" in entry:
        return False
    content = _content(entry)
    if isinstance(content, str):
        return True
    if isinstance(content, list):
        return not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return False


def turn_ages(entries: list[Entry]) -> list[int]:
    """For each entry, how many prompts come after it."""
    total = sum(1 for e in entries if is_prompt(e))
    ages: list[int] = []
    seen = 0
    for e in entries:
        if is_prompt(e):
            seen += 1
        ages.append(total - seen)
    return ages


def tool_uses(entries: list[Entry]) -> dict[str, dict[str, Any]]:
    """``tool_use`` blocks by id (Claude Code writes one block per assistant entry)."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e.get("type") != "assistant":
            continue
        content = _content(e)
        if isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str):
                    out[b["id"]] = b
    return out


def _blocks(entry: Entry, kind: str) -> list[dict[str, Any]]:
    content = _content(entry)
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


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
        spill = Path(self.policy.spill_dirname)
        if spill.is_absolute() or ".." in spill.parts:
            raise ValueError(
                f"TrimPolicy.spill_dirname={self.policy.spill_dirname!r} must be a relative path inside the "
                "workspace; use something like '.flower/spill'."
            )

    @property
    def spill_dir(self) -> Path:
        return self.workspace.resolve() / self.policy.spill_dirname

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        entries = await super().load(key)
        self.last_report = {}
        if not entries:
            return entries
        return await anyio.to_thread.run_sync(self._reshape, entries)

    def _reshape(self, entries: list[Any]) -> list[Any]:
        if self.ephemeral.enabled:
            entries = self.expire(entries)
        if self.policy.enabled:
            entries = self.trim(entries)
        return entries

    def _count(self, name: str, n: int = 1) -> None:
        self.last_report[name] = self.last_report.get(name, 0) + n

    # -- expiry -----------------------------------------------------------------
    def expire(self, entries: list[Entry]) -> list[Entry]:
        """Replace old ephemeral Bash results by ``ephemeral.text``; cap recent ones at ``max_chars``.

        Mutates and returns ``entries`` (callers pass fresh copies from ``load``).
        """
        pol = self.ephemeral
        uses = tool_uses(entries)
        ages = turn_ages(entries)
        for entry, age in zip(entries, ages):
            if entry.get("type") != "user" or entry.get("isCompactSummary"):
                continue
            for block in _blocks(entry, "tool_result"):
                use = uses.get(block.get("tool_use_id", ""))
                cmd = use.get("input", {}).get("command") if use and use.get("name") == "Bash" else None
                if not isinstance(cmd, str) or not is_ephemeral(cmd):
                    continue
                before = _text_len(block.get("content"))
                if age >= pol.keep_recent:
                    block["content"] = pol.text.format(cmd=_short_cmd(cmd), age=age)
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
    def trim(self, entries: list[Entry]) -> list[Entry]:
        """Spill long text outside the last ``policy.keep_recent`` turns. Mutates and returns ``entries``."""
        ages = turn_ages(entries)
        keep = self.policy.keep_recent
        for entry, age in zip(entries, ages):
            if age < keep or entry.get("isCompactSummary"):
                continue
            kind = entry.get("type")
            if kind == "user":
                for block in _blocks(entry, "tool_result"):
                    if "content" in block:
                        block["content"] = _map_text(block["content"], self._spill)
            elif kind == "assistant":
                for block in _blocks(entry, "text"):
                    if isinstance(block.get("text"), str):
                        block["text"] = self._spill(block["text"])
                for block in _blocks(entry, "tool_use"):
                    inp = block.get("input")
                    if isinstance(inp, dict):
                        block["input"] = {k: self._spill(v) if isinstance(v, str) else v for k, v in inp.items()}
        return entries

    def _spill(self, text: str) -> str:
        """Write ``text`` once under its content hash; return the pointer line and a short head."""
        if len(text) <= self.policy.min_chars:
            return text
        data = text.encode("utf-8", "surrogatepass")
        path = self.spill_dir / f"{hashlib.sha256(data).hexdigest()[:16]}.txt"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
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

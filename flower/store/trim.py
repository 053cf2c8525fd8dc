"""Trimming on resume: what a resumed conversation sends back to the model, made lean.

A long run resumed from the store would otherwise replay every old tool output in full.
At ``load()`` — and only there — two passes reshape a *copy* of the transcript (the rows
in SQLite never change a byte):

* ``expire()``: Bash results of ephemeral commands (``is_ephemeral``) outside the newest
  ``EphemeralPolicy.keep_recent`` tool results get their body replaced by
  ``EphemeralPolicy.placeholder(cmd, age)``. Dropped, not spilled: a stale ``git status``
  is wrong, not merely long. Results above ``max_chars`` are left for ``trim()``.
* ``trim()``: outside the newest ``TrimPolicy.keep_recent`` tool results, a body of
  ``min_chars`` characters or more is written to
  ``<workspace>/<spill_dirname>/<sha256[:16]>.txt`` and replaced by
  ``TrimPolicy.placeholder(path, n)``, so the model can still ``Read`` it.

Both windows count ``tool_result`` blocks, newest last, in the one transcript being
loaded (the SDK loads the main transcript and each subagent transcript separately).

Invariants the API imposes: a ``tool_result`` block is never removed, only its content
changes (else "Missing Tool Result Block"); image/document blocks are never touched;
``isCompactSummary`` and ``isMeta`` entries are left whole. Only tool results are
trimmed: prompts, assistant text and tool inputs are what the model said and was told.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from flower.core.errors import ConfigError
from flower.core.files import spill_file
from flower.store.ephemeral import EphemeralPolicy, is_ephemeral
from flower.store.sqlite import SqliteSessionStore, _gc_paused

__all__ = ["TranscriptIndex", "TrimPolicy", "TrimmingSessionStore", "trim_report"]

Entry = dict[str, Any]

SPILL_TEXT = "[这段工具结果共 {n} 字符,已转存到 {path},需要时用 Read 读取全文]"
CMD_CHARS = 80


@dataclass
class TrimPolicy:
    """Spill long old tool results to disk on resume.

    ``keep_recent``: the newest N tool results keep their original text.
    ``min_chars``: shorter bodies are not worth the cut. ``spill_dirname`` is relative
    to the workspace and must stay inside it, or the agent's ``Read`` cannot reach it.

    Not the same directory as ``spill_guard``'s (``<workbench>/spill/``): that one trims
    at the moment a tool returns, this one at resume. Keep them apart on purpose.
    """

    keep_recent: int = 20
    min_chars: int = 2000
    spill_dirname: str = ".flower/spill"
    enabled: bool = True

    def placeholder(self, path: str, n: int) -> str:
        """The pointer line that replaces a spilled body of ``n`` characters written to ``path``."""
        return SPILL_TEXT.format(n=n, path=path)


# ---------------------------------------------------------------------------
# Transcript shape (shared with prune.py)
# ---------------------------------------------------------------------------


def _content(entry: Entry) -> Any:
    msg = entry.get("message")
    return msg.get("content") if isinstance(msg, dict) else None


class TranscriptIndex:
    """One pass over a transcript: what expiry, trimming and pruning look at, found once.

    Blocks are referenced, not copied, so the passes edit the entries in place. Lists
    are in transcript order. ``results`` leaves out ``isMeta`` / ``isCompactSummary``
    entries: those are never edited.
    """

    __slots__ = ("uses", "results", "tied", "failed")

    def __init__(self, entries: list[Entry]) -> None:
        self.uses: dict[str, tuple[int, dict[str, Any]]] = {}  # tool_use id -> (entry index, block)
        self.results: list[tuple[int, dict[str, Any]]] = []  # (entry index, tool_result block)
        self.tied: list[tuple[int, str]] = []  # entries that reference a tool call: (index, tool_use id)
        self.failed: list[int] = []  # assistant entries flagged as a failed API call (candidates)
        uses, results, tied = self.uses, self.results, self.tied
        for i, e in enumerate(entries):
            kind = e.get("type")
            if kind == "user":
                content = _content(e)
                if isinstance(content, list) and not e.get("isCompactSummary") and not e.get("isMeta"):
                    for b in content:
                        if isinstance(b, dict) and b.get("type") == "tool_result":
                            results.append((i, b))
            elif kind == "assistant":
                if "isApiErrorMessage" in e or "error" in e:
                    self.failed.append(i)
                content = _content(e)
                if isinstance(content, list):
                    for b in content:
                        if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str):
                            uses[b["id"]] = (i, b)
            elif kind == "attachment" or kind == "progress":
                att = e.get("attachment")
                tid = e.get("toolUseID") or (att.get("toolUseID") if isinstance(att, dict) else None)
                if isinstance(tid, str):
                    tied.append((i, tid))
            src = e.get("sourceToolUseID")
            if isinstance(src, str):
                tied.append((i, src))

    def older(self, keep: int) -> list[tuple[int, dict[str, Any]]]:
        """The results outside the newest ``keep`` (all of them when ``keep <= 0``)."""
        return self.results[: max(0, len(self.results) - max(0, keep))]


def _plain_text(content: Any) -> str | None:
    """A result body as text: the string, or its text blocks joined. None if nothing to cut."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b["text"] for b in content
                 if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]
        return "\n".join(texts) if texts else None
    return None


def _only_text(content: Any) -> bool:
    return isinstance(content, str) or (
        isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content)
    )


def _with_text(content: Any, text: str) -> Any:
    """``content`` with its text replaced by ``text``; image/document blocks kept, in place."""
    if isinstance(content, str):
        return text
    out, placed = [], False
    for b in content:
        if isinstance(b, dict) and b.get("type") == "text":
            if not placed:
                out.append({**b, "text": text})
                placed = True
        else:
            out.append(b)
    return out


def _short_cmd(cmd: str) -> str:
    """The command's first line, at most ``CMD_CHARS``; "…" says something was cut."""
    whole = cmd.strip()
    line = whole.splitlines()[0]
    return line if line == whole and len(line) <= CMD_CHARS else line[:CMD_CHARS].rstrip() + "…"


# ---------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------


class TrimmingSessionStore(SqliteSessionStore):
    """``SqliteSessionStore`` whose ``load()`` expires stale ephemeral results and spills old bulk.

    ``last_report`` describes the latest ``load()`` (of one key): ``expired`` (written by
    ``expire``), ``cleared`` / ``kept`` / ``chars_saved`` (written by ``trim``: results
    spilled, results exempt as recent, characters no longer sent). A disabled pass
    writes nothing.
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
            raise ConfigError(
                f"TrimPolicy.spill_dirname={self.policy.spill_dirname!r} must be a relative path inside the "
                "workspace; use something like '.flower/spill'.", setting="TrimPolicy.spill_dirname"
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

    # -- expiry -----------------------------------------------------------------
    def expire(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> list[Entry]:
        """Replace the body of old ephemeral Bash results by ``ephemeral.placeholder(cmd, age)``.

        The command comes from the matching ``tool_use``; results above ``max_chars``,
        results holding images, and denied calls (which never ran) are skipped. Edits
        ``entries`` in place and returns it; sets ``last_report["expired"]``.
        """
        pol = self.ephemeral
        ix = ix or TranscriptIndex(entries)
        total, expired = len(ix.results), 0
        for pos, (i, block) in enumerate(ix.older(pol.keep_recent)):
            use = ix.uses.get(block.get("tool_use_id", ""))
            if use is None or use[1].get("name") != "Bash":
                continue
            inp = use[1].get("input")
            cmd = inp.get("command") if isinstance(inp, dict) else None
            if not isinstance(cmd, str) or not is_ephemeral(cmd) or "toolDenialKind" in entries[i]:
                continue
            content = block.get("content")
            text = _plain_text(content)
            if not _only_text(content) or (text is not None and len(text) > pol.max_chars):
                continue
            block["content"] = pol.placeholder(_short_cmd(cmd), total - 1 - pos)
            expired += 1
        self.last_report["expired"] = expired
        return entries

    # -- trimming ---------------------------------------------------------------
    def trim(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> list[Entry]:
        """Spill old result bodies of ``min_chars`` or more; the newest ``keep_recent`` are exempt.

        Edits ``entries`` in place and returns it; sets ``cleared`` / ``kept`` /
        ``chars_saved`` in ``last_report``.
        """
        pol = self.policy
        ix = ix or TranscriptIndex(entries)
        old = ix.older(pol.keep_recent)
        root = self.spill_dir
        cleared = saved = 0
        for _, block in old:
            content = block.get("content")
            text = _plain_text(content)
            if text is None or len(text) < pol.min_chars:
                continue
            pointer = pol.placeholder(str(spill_file(root, text)), len(text))
            block["content"] = _with_text(content, pointer)
            cleared += 1
            saved += max(0, len(text) - len(pointer))
        self.last_report.update(cleared=cleared, kept=len(ix.results) - len(old), chars_saved=saved)
        return entries


def trim_report(store: TrimmingSessionStore | Mapping[str, int]) -> str:
    """``store.last_report`` as one line of Chinese for the UI log (a report dict is accepted too).

    Nothing done → ``"未裁剪"``; only expiry → ``"N 个时效性结果标记为过期"``; otherwise
    ``"裁掉 N 个工具结果(保留最近 M 个),省下 ~X tokens"`` with X = ``chars_saved // 4``.
    """
    report = store.last_report if isinstance(store, TrimmingSessionStore) else store
    cleared, expired = report.get("cleared", 0), report.get("expired", 0)
    if cleared:
        return f"裁掉 {cleared} 个工具结果(保留最近 {report.get('kept', 0)} 个),省下 ~{report.get('chars_saved', 0) // 4} tokens"
    if expired:
        return f"{expired} 个时效性结果标记为过期"
    return "未裁剪"

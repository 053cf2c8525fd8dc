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

from flower.core.errors import ConfigError
from flower.core.files import SpillFolder
from flower.core.shell import is_ephemeral
from flower.store.ephemeral import EphemeralPolicy
from flower.store.reshape import Pass, Report, ReshapingSessionStore
from flower.store.sqlite import SqliteSessionStore
from flower.store.transcript import Entry, TranscriptIndex, _content, _only_text, _plain_text, _short_cmd, _with_text

__all__ = ["Entry", "Expire", "Trim", "TranscriptIndex", "TrimPolicy", "TrimmingSessionStore", "expire", "trim",
           "trim_report", "_content"]

SPILL_TEXT = "[这段工具结果共 {n} 字符,已转存到 {path},需要时用 Read 读取全文]"


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
# The passes: functions of one transcript
# ---------------------------------------------------------------------------


def expire(entries: list[Entry], ix: TranscriptIndex, policy: EphemeralPolicy) -> int:
    """Replace the body of old ephemeral Bash results by ``policy.placeholder(cmd, age)``; returns how many.

    The command comes from the matching ``tool_use``; results above ``max_chars``,
    results holding images, and denied calls (which never ran) are skipped. Only Bash:
    a Read is never a snapshot of a moment. Edits ``entries`` in place.
    """
    total, expired = len(ix.results), 0
    verdicts: dict[str, bool] = {}  # the same few commands recur all session long: lex each once
    for pos, (i, block) in enumerate(ix.older(policy.keep_recent)):
        use = ix.uses.get(block.get("tool_use_id", ""))
        if use is None or use[1].get("name") != "Bash":
            continue
        inp = use[1].get("input")
        cmd = inp.get("command") if isinstance(inp, dict) else None
        if not isinstance(cmd, str) or "toolDenialKind" in entries[i]:
            continue
        ephemeral = verdicts.get(cmd)
        if ephemeral is None:
            ephemeral = verdicts[cmd] = is_ephemeral(cmd)
        if not ephemeral:
            continue
        content = block.get("content")
        text = _plain_text(content)
        if not _only_text(content) or (text is not None and len(text) > policy.max_chars):
            continue
        block["content"] = policy.placeholder(_short_cmd(cmd), total - 1 - pos)
        expired += 1
    return expired


def trim(entries: list[Entry], ix: TranscriptIndex, policy: TrimPolicy, spill_dir: Path) -> Report:
    """Spill old result bodies of ``min_chars`` or more under ``spill_dir``; the newest ``keep_recent`` are exempt.

    Edits ``entries`` in place; reports ``cleared`` / ``kept`` / ``chars_saved``.
    """
    old = ix.older(policy.keep_recent)
    cleared = saved = 0
    spilled = SpillFolder(spill_dir)
    for _, block in old:
        content = block.get("content")
        text = _plain_text(content)
        if text is None or len(text) < policy.min_chars:
            continue
        pointer = policy.placeholder(spilled.put(text), len(text))
        block["content"] = _with_text(content, pointer)
        cleared += 1
        saved += max(0, len(text) - len(pointer))
    return {"cleared": cleared, "kept": len(ix.results) - len(old), "chars_saved": saved}


@dataclass(frozen=True)
class Expire:
    """The expiry pass (``EphemeralPolicy``), for ``ReshapingSessionStore``."""

    policy: EphemeralPolicy
    name: str = "expire"

    def __call__(self, entries: list[Entry], ix: TranscriptIndex) -> tuple[list[Entry], Report]:
        return entries, {"expired": expire(entries, ix, self.policy)}


@dataclass(frozen=True)
class Trim:
    """The trimming pass (``TrimPolicy``): spills under ``spill_dir``, which the agent must be able to Read."""

    policy: TrimPolicy
    spill_dir: Path
    name: str = "trim"

    def __call__(self, entries: list[Entry], ix: TranscriptIndex) -> tuple[list[Entry], Report]:
        return entries, trim(entries, ix, self.policy, self.spill_dir)


# ---------------------------------------------------------------------------
# The store of the reference: SQLite with expiry and trimming on load
# ---------------------------------------------------------------------------


class TrimmingSessionStore(ReshapingSessionStore):
    """``ReshapingSessionStore(SqliteSessionStore(path), [Expire, Trim])``, built from two policies.

    Only a constructor over the composed store: ``load()`` is the decorator's. The passes follow the
    policies — assigning ``policy``, ``ephemeral`` or ``workspace`` rebuilds them, and a disabled
    policy contributes no pass (so it reports nothing). ``last_report`` describes the latest
    ``load()`` (of one key): ``expired`` (expiry), ``cleared`` / ``kept`` / ``chars_saved``
    (trimming: results spilled, results exempt as recent, characters no longer sent).
    ``has_session``, ``last_context``, ``projects`` and ``close`` are the SQLite store's.
    """

    inner: SqliteSessionStore

    def __init__(
        self,
        path: str | Path,
        workspace: str | Path,
        policy: TrimPolicy | None = None,
        ephemeral: EphemeralPolicy | None = None,
    ) -> None:
        super().__init__(SqliteSessionStore(path), [])
        self._workspace = Path(workspace)
        self._ephemeral = ephemeral if ephemeral is not None else EphemeralPolicy()
        self.policy = policy if policy is not None else TrimPolicy()  # checks it and builds the passes

    @property
    def workspace(self) -> Path:
        return self._workspace

    @workspace.setter
    def workspace(self, value: str | Path) -> None:
        self._workspace = Path(value)
        self._rebuild()

    @property
    def policy(self) -> TrimPolicy:
        return self._policy

    @policy.setter
    def policy(self, value: TrimPolicy) -> None:
        spill = Path(value.spill_dirname)
        if spill.is_absolute() or ".." in spill.parts:
            raise ConfigError(
                f"TrimPolicy.spill_dirname={value.spill_dirname!r} must be a relative path inside the "
                "workspace; use something like '.flower/spill'.", setting="TrimPolicy.spill_dirname"
            )
        self._policy = value
        self._rebuild()

    @property
    def ephemeral(self) -> EphemeralPolicy:
        return self._ephemeral

    @ephemeral.setter
    def ephemeral(self, value: EphemeralPolicy) -> None:
        self._ephemeral = value
        self._rebuild()

    @property
    def spill_dir(self) -> Path:
        """``<workspace>/<spill_dirname>``, absolute: the pointer lines name it for ``Read``."""
        return self.workspace.resolve() / self.policy.spill_dirname

    def _passes(self) -> list[Pass]:
        """The load-time passes, in order, from the current policies; subclasses append theirs."""
        out: list[Pass] = []
        if self.ephemeral.enabled:
            out.append(Expire(self.ephemeral))
        if self.policy.enabled:
            out.append(Trim(self.policy, self.spill_dir))
        return out

    def _rebuild(self) -> None:
        self.passes = self._passes()

    # -- the SQLite store's own calls ------------------------------------------------------------
    def has_session(self, project_key: str, session_id: str) -> bool:
        return self.inner.has_session(project_key, session_id)

    def last_context(self, project_key: str, session_id: str, *, scan: int = 60) -> int:
        return self.inner.last_context(project_key, session_id, scan=scan)

    def projects(self) -> list[str]:
        return self.inner.projects()

    def close(self) -> None:
        self.inner.close()

    # -- the passes as methods, on a plain list (sets ``last_report`` like a load) ----------------
    def expire(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> list[Entry]:
        """``expire()`` with this store's policy; edits ``entries`` in place and returns it."""
        self.last_report["expired"] = expire(entries, ix or TranscriptIndex(entries), self.ephemeral)
        return entries

    def trim(self, entries: list[Entry], ix: TranscriptIndex | None = None) -> list[Entry]:
        """``trim()`` with this store's policy and spill folder; edits ``entries`` in place and returns it."""
        self.last_report.update(trim(entries, ix or TranscriptIndex(entries), self.policy, self.spill_dir))
        return entries


def trim_report(store: ReshapingSessionStore | Mapping[str, int]) -> str:
    """``store.last_report`` as one line of Chinese for the UI log (a report dict is accepted too).

    Nothing done → ``"未裁剪"``; only expiry → ``"N 个时效性结果标记为过期"``; otherwise
    ``"裁掉 N 个工具结果(保留最近 M 个),省下 ~X tokens"`` with X = ``chars_saved // 4``.
    """
    report = store.last_report if isinstance(store, ReshapingSessionStore) else store
    cleared, expired = report.get("cleared", 0), report.get("expired", 0)
    if cleared:
        return f"裁掉 {cleared} 个工具结果(保留最近 {report.get('kept', 0)} 个),省下 ~{report.get('chars_saved', 0) // 4} tokens"
    if expired:
        return f"{expired} 个时效性结果标记为过期"
    return "未裁剪"

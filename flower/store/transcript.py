"""Transcript shape: what the reshaping passes look at, found in one pass over the entries.

Shared by expiry, trimming and pruning (``trim.py``, ``prune.py``) and by ``reshape.py``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Entry", "TranscriptIndex"]

Entry = dict[str, Any]

CMD_CHARS = 80


def _content(entry: Entry) -> Any:
    msg = entry.get("message")
    return msg.get("content") if isinstance(msg, dict) else None


class TranscriptIndex:
    """One pass over a transcript: what expiry, trimming and pruning look at, found once.

    Blocks are referenced, not copied, so the passes edit the entries in place. Lists
    are in transcript order. ``results`` leaves out ``isMeta`` / ``isCompactSummary``
    entries: those are never edited.
    """

    __slots__ = ("uses", "results", "tied", "failed", "marked")

    def __init__(self, entries: list[Entry]) -> None:
        self.uses: dict[str, tuple[int, dict[str, Any]]] = {}  # tool_use id -> (entry index, block)
        self.results: list[tuple[int, dict[str, Any]]] = []  # (entry index, tool_result block)
        self.tied: list[tuple[int, str]] = []  # entries that reference a tool call: (index, tool_use id)
        self.failed: list[int] = []  # assistant entries flagged as a failed API call (candidates)
        self.marked: set[int] = set()  # result entries carrying ``toolDenialKind`` (denials, interrupts)
        uses, results, tied, marked = self.uses, self.results, self.tied, self.marked
        # one walk, the cheapest tests first: this runs on every entry of every resume
        for i, e in enumerate(entries):
            kind = e.get("type")
            if kind == "user":
                msg = e.get("message")
                content = msg.get("content") if isinstance(msg, dict) else None
                if isinstance(content, list) and not e.get("isCompactSummary") and not e.get("isMeta"):
                    found = False
                    for b in content:
                        if isinstance(b, dict) and b.get("type") == "tool_result":
                            results.append((i, b))
                            found = True
                    if found and "toolDenialKind" in e:
                        marked.add(i)
            elif kind == "assistant":
                if "isApiErrorMessage" in e or "error" in e:
                    self.failed.append(i)
                msg = e.get("message")
                content = msg.get("content") if isinstance(msg, dict) else None
                if isinstance(content, list):
                    for b in content:
                        if isinstance(b, dict) and b.get("type") == "tool_use":
                            tid = b.get("id")
                            if isinstance(tid, str):
                                uses[tid] = (i, b)
            elif kind == "attachment" or kind == "progress":
                att = e.get("attachment")
                tid = e.get("toolUseID") or (att.get("toolUseID") if isinstance(att, dict) else None)
                if isinstance(tid, str):
                    tied.append((i, tid))
            if "sourceToolUseID" in e:
                src = e["sourceToolUseID"]
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

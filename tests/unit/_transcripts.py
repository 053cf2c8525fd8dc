"""Build transcripts shaped like the ones the bundled Claude Code CLI (2.1.x) writes.

Shapes copied from a real session mirrored through the SDK (see tests/e2e/test_store_cli.py
for the same mechanisms through the real CLI):

* a prompt is ``queue-operation`` enqueue/dequeue + a ``user`` entry whose content is a
  string, followed by ``attachment`` entries chained after it;
* an assistant reply is one entry **per content block**, all sharing ``message.id``,
  each the parent of the next;
* each tool result is its own ``user`` entry: ``parentUuid`` and
  ``sourceToolAssistantUUID`` = the entry holding its ``tool_use``, plus ``toolUseResult``;
  the next assistant entry hangs off the last result;
* uuid-less bookkeeping lines (``last-prompt`` with ``leafUuid``, ``cost-state``…);
* the markers the CLI puts on a result entry (seen through the real CLI, see
  tests/e2e/test_store_cli.py): a PreToolUse hook deny → ``toolDenialKind: "permission-rule"``
  + ``permissionDecision {decision: reject, source: hook}``; a call nobody could approve →
  ``toolDenialKind: "user-rejected"`` + ``permissionDecision {decision: reject, source: config}``;
  a call stopped while running by an interrupt → ``toolDenialKind: "user-rejected"`` and no
  ``permissionDecision``; a stand-in for a call cut off by the end of a session →
  ``toolDenialKind: "interrupted"``; an API error → an assistant entry with model
  ``<synthetic>`` and ``isApiErrorMessage: true``.
"""

from __future__ import annotations

import copy
import itertools
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

Entry = dict[str, Any]
_ids = itertools.count(1)


DENIAL_MARKS: dict[str, dict[str, Any]] = {
    "hook": {"toolDenialKind": "permission-rule",
             "permissionDecision": {"decision": "reject", "source": "hook", "reasonType": "hook",
                                    "reasonCode": "hook:PreToolUse"}},
    "rule": {"toolDenialKind": "permission-rule",
             "permissionDecision": {"decision": "reject", "source": "config", "reasonType": "subcommandResults",
                                    "ruleSource": "projectSettings", "reasonCode": "rule:projectSettings"}},
    "not-granted": {"toolDenialKind": "user-rejected",
                    "permissionDecision": {"decision": "reject", "source": "config", "reasonCode": "unknown"}},
    "interrupt": {"toolDenialKind": "user-rejected"},
    "cut-off": {"toolDenialKind": "interrupted"},
}
STOP_TEXT = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file "
             "edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to "
             "tell you how to proceed. Correction to the text above: this call was stopped while running.")


@dataclass
class Use:
    name: str
    input: dict[str, Any]
    output: str | list[dict[str, Any]] = ""
    error: bool = False
    id: str = field(default_factory=lambda: f"toolu_{next(_ids):06d}")
    mark: str | None = None  # a key of DENIAL_MARKS: the CLI's structural marker on the result entry
    orphan: bool = False  # no result written (the process stopped between call and result)


@dataclass
class Transcript:
    session_id: str = field(default_factory=lambda: str(uuidlib.uuid4()))
    entries: list[Entry] = field(default_factory=list)
    tip: str | None = None

    def _base(self, **kw: Any) -> Entry:
        return {"isSidechain": False, "userType": "external", "entrypoint": "sdk-py", "cwd": "/w",
                "sessionId": self.session_id, "version": "2.1.332", "gitBranch": "main",
                "timestamp": "2026-01-01T00:00:00.000Z", **kw}

    def _chain(self, entry: Entry) -> Entry:
        entry["uuid"] = str(uuidlib.uuid4())
        entry.setdefault("parentUuid", self.tip)
        self.entries.append(entry)
        self.tip = entry["uuid"]
        return entry

    def prompt(self, text: str) -> Entry:
        self.entries.append({"type": "queue-operation", "operation": "enqueue", "content": text,
                             "sessionId": self.session_id, "timestamp": "2026-01-01T00:00:00.000Z"})
        user = self._chain(self._base(type="user", message={"role": "user", "content": text},
                                      promptId=str(uuidlib.uuid4())))
        self._chain(self._base(type="attachment", attachment={"type": "date", "date": "2026-01-01"}))
        return user

    def reply(self, text: str = "", *uses: Use) -> list[Entry]:
        """One assistant message: a text entry (if any), one entry per tool_use, then the results."""
        mid = f"msg_{next(_ids):06d}"
        blocks: list[dict[str, Any]] = ([{"type": "text", "text": text}] if text else [])
        blocks += [{"type": "tool_use", "id": u.id, "name": u.name, "input": u.input} for u in uses]
        holders: dict[str, str] = {}
        out = []
        for b in blocks:
            e = self._chain(self._base(type="assistant", message={
                "id": mid, "type": "message", "role": "assistant", "model": "claude-x", "content": [b],
                "stop_reason": "tool_use" if uses else "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}))
            out.append(e)
            if b["type"] == "tool_use":
                holders[b["id"]] = e["uuid"]
        self.entries.append({"type": "last-prompt", "lastPrompt": "x", "leafUuid": self.tip,
                             "sessionId": self.session_id})
        for u in uses:
            if u.orphan:
                continue
            result: dict[str, Any] = {"tool_use_id": u.id, "type": "tool_result", "content": u.output,
                                      "is_error": u.error}
            tur: Any = (f"Error: {u.output}" if u.error else
                        {"stdout": u.output, "stderr": "", "interrupted": False, "isImage": False})
            out.append(self._chain(self._base(
                type="user", parentUuid=holders[u.id], sourceToolAssistantUUID=holders[u.id],
                message={"role": "user", "content": [result]}, toolUseResult=tur,
                **copy.deepcopy(DENIAL_MARKS[u.mark] if u.mark else {}))))
        return out

    def api_error(self, text: str = "API Error: 500 Internal server error.") -> Entry:
        """The synthetic assistant message the CLI writes when the API call fails for good."""
        return self._chain(self._base(
            type="assistant", isApiErrorMessage=True, error="server_error", apiErrorStatus=500,
            message={"id": str(uuidlib.uuid4()), "type": "message", "role": "assistant", "model": "<synthetic>",
                     "content": [{"type": "text", "text": text}], "stop_reason": "stop_sequence",
                     "usage": {"input_tokens": 0, "output_tokens": 0}}))

    def compact_summary(self, text: str) -> Entry:
        return self._chain(self._base(type="user", isCompactSummary=True, isVisibleInTranscriptOnly=True,
                                      message={"role": "user", "content": text}))

    def end(self) -> None:
        self.entries.append({"type": "last-prompt", "lastPrompt": "x", "leafUuid": self.tip,
                             "sessionId": self.session_id})
        self.entries.append({"type": "cost-state", "sessionId": self.session_id, "totalCostUSD": 0.1})


def bash(cmd: str, output: str = "", *, error: bool = False) -> Use:
    return Use("Bash", {"command": cmd, "description": "run"}, output, error)


def denied(cmd: str, how: str = "hook", reason: str = "协调者没有写权限。") -> Use:
    """A Bash call the harness refused, with the text and marker the CLI writes for ``how``."""
    text = {"hook": f"PreToolUse:Bash hook error: {reason}",
            "rule": f"Permission to use Bash with command {cmd} has been denied.",
            "not-granted": "Claude requested permissions to use Bash, but you haven't granted it yet."}[how]
    return Use("Bash", {"command": cmd, "description": "run"}, text, True, mark=how)


def read(path: str, output: str) -> Use:
    return Use("Read", {"file_path": path}, output)


def tool_results(entries: list[Entry]) -> dict[str, dict[str, Any]]:
    out = {}
    for e in entries:
        content = (e.get("message") or {}).get("content")
        if e.get("type") == "user" and isinstance(content, list):
            for b in content:
                if b.get("type") == "tool_result":
                    out[b["tool_use_id"]] = b
    return out


def tool_use_ids(entries: list[Entry]) -> list[str]:
    return [b["id"] for e in entries if e.get("type") == "assistant"
            for b in e["message"]["content"] if b.get("type") == "tool_use"]


def assert_valid_chain(entries: list[Entry]) -> None:
    """Every link points at a present entry; the leaf walks back to the root; tool calls pair up."""
    uuids = {e["uuid"] for e in entries if "uuid" in e}
    for e in entries:
        for f in ("parentUuid", "sourceToolAssistantUUID", "leafUuid"):
            if e.get(f) is not None:
                assert e[f] in uuids, f"{f} {e[f]} dangles in {e.get('type')} entry"
    conversation(entries)  # the leaf walks back to the root
    assert sorted(tool_use_ids(entries)) == sorted(tool_results(entries)), "tool_use/tool_result mismatch"


def conversation(entries: list[Entry]) -> list[Entry]:
    """The entries the leaf's parentUuid chain reaches, root first (what a resume replays)."""
    by_uuid = {e["uuid"]: e for e in entries if "uuid" in e}
    u = [e for e in entries if e.get("type") == "last-prompt"][-1]["leafUuid"]
    out = []
    while u is not None:
        out.append(by_uuid[u])
        assert len(out) <= len(by_uuid), "cycle in parentUuid chain"
        u = by_uuid[u]["parentUuid"]
    return out[::-1]

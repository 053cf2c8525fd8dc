"""Events: the one stable shape the SDK's message stream is flattened into.

The interaction layer (a terminal, a web UI, the service) only knows `Event`; it
never imports an SDK type. That boundary is what lets the UI change without the
core changing. `normalize()` turns one SDK message into 0..N events; the runtime,
the workflow and the human channel emit the few kinds the SDK has no message for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from claude_agent_sdk import (
    AssistantMessage,
    ConversationResetMessage,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from .usage import context_of

__all__ = ["Event", "EventKind", "OnEvent", "normalize", "EVENT_KINDS"]

EventKind = Literal[
    "text", "thinking", "tool_call", "tool_result", "task", "system", "reset", "result", "error", "prompt",
    "unknown",  # ↑ produced by normalize()
    "retry", "step", "handoff", "ask",  # ↑ emitted by Runtime, Workflow.run, HumanChannel
]
EVENT_KINDS: tuple[str, ...] = EventKind.__args__  # type: ignore[attr-defined]

TOOL_TEXT_MAX = 200
RESULT_TEXT_MAX = 500


@dataclass
class Event:
    """One thing that happened, for a UI: ``print(ev)`` is already readable.

    ``tool`` is set on ``tool_call`` only; ``raw`` is the SDK object, for digging.
    ``step`` and ``at`` are flower's additions (which step emitted it, when).
    """

    kind: EventKind | str
    text: str = ""
    tool: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    raw: Any = None
    step: str = field(default="", kw_only=True)
    at: float = field(default_factory=time.time, kw_only=True, compare=False)

    def __str__(self) -> str:
        if self.kind == "tool_call":
            return f"[{self.tool}] {self.text}"
        return self.text if self.text else f"<{self.kind}>"


OnEvent = Callable[[Event], None]


# -- normalize ---------------------------------------------------------------------------------

def normalize(message: Any) -> list[Event]:
    """Flatten one SDK message into 0..N events (never raises on an unknown shape)."""
    if isinstance(message, AssistantMessage):
        return _assistant(message)
    if isinstance(message, UserMessage):
        return _user(message)
    if isinstance(message, ResultMessage):
        return [Event("result", message.subtype, payload={
            "session_id": message.session_id, "cost_usd": message.total_cost_usd or 0.0,
            "num_turns": message.num_turns, "is_error": bool(message.is_error)}, raw=message)]
    if isinstance(message, ConversationResetMessage):
        return [Event("reset", payload={
            "trigger": "conversation_reset", "pre_tokens": None, "post_tokens": None, "micro": False,
            "subtype": "conversation_reset", "session_id": message.session_id,
            "new_conversation_id": message.new_conversation_id}, raw=message)]
    if isinstance(message, SystemMessage):
        return [_system(message)]
    return [Event("unknown", payload={"type": type(message).__name__}, raw=message)]


def _common(parent_tool_use_id: str | None, usage: dict[str, Any] | None) -> dict[str, Any]:
    """What every assistant/user event carries: who spoke, and how full the context is."""
    payload: dict[str, Any] = {"subagent": bool(parent_tool_use_id)}
    if parent_tool_use_id:
        payload["parent_tool_use_id"] = parent_tool_use_id
    payload["context"] = context_of(usage)
    return payload


def _assistant(msg: AssistantMessage) -> list[Event]:
    common = _common(msg.parent_tool_use_id, msg.usage)
    if getattr(msg, "isApiErrorMessage", False) or msg.model == "<synthetic>":
        # A dropped connection's text must never pass for the model's answer (nor reach the next step).
        text = "\n".join(b.text for b in msg.content if isinstance(b, TextBlock))
        return [Event("error", text, payload={**common, "synthetic": True, "error": msg.error}, raw=msg)]
    out: list[Event] = []
    for block in msg.content:
        if isinstance(block, TextBlock):
            out.append(Event("text", block.text, payload=dict(common), raw=block))
        elif isinstance(block, ThinkingBlock):
            out.append(Event("thinking", block.thinking, payload=dict(common), raw=block))
        elif isinstance(block, ToolUseBlock):
            inp = block.input or {}
            out.append(Event("tool_call", tool_summary(inp), tool=block.name,
                             payload={**common, "id": block.id, "input": inp}, raw=block))
        elif isinstance(block, ToolResultBlock):
            out.append(_tool_result(block, common))
        else:
            out.append(Event("unknown", payload={**common, "type": type(block).__name__}, raw=block))
    return out


def _user(msg: UserMessage) -> list[Event]:
    common = _common(msg.parent_tool_use_id, None)
    if isinstance(msg.content, str):
        return [Event("prompt", msg.content, payload=common, raw=msg)]
    out: list[Event] = []
    for block in msg.content:
        if isinstance(block, ToolResultBlock):
            out.append(_tool_result(block, common))
        elif isinstance(block, TextBlock):
            out.append(Event("prompt", block.text, payload=dict(common), raw=block))
        else:
            out.append(Event("unknown", payload={**common, "type": type(block).__name__}, raw=block))
    return out


def _tool_result(block: ToolResultBlock, common: dict[str, Any]) -> Event:
    return Event("tool_result", _content_text(block.content)[:RESULT_TEXT_MAX],
                 payload={**common, "tool_use_id": block.tool_use_id, "is_error": bool(block.is_error)}, raw=block)


def _system(msg: SystemMessage) -> Event:
    name = type(msg).__name__
    if name.startswith("Task") and name.endswith("Message"):  # TaskStarted / TaskProgress / TaskNotification …
        payload: dict[str, Any] = {"kind": name}
        for key in ("task_id", "description", "status", "summary", "output_file", "tool_use_id",
                    "last_tool_name", "task_type", "session_id", "usage", "patch"):
            value = getattr(msg, key, None)
            if value is not None:
                payload[key] = value
        return Event("task", "", payload=payload, raw=msg)
    subtype = msg.subtype
    data = msg.data if isinstance(msg.data, dict) else {}
    if subtype in ("compact_boundary", "microcompact_boundary"):
        meta = data.get("compact_metadata") or data.get("microcompact_metadata") or data.get("compactMetadata") or {}
        return Event("reset", payload={
            "trigger": meta.get("trigger"), "pre_tokens": meta.get("pre_tokens", meta.get("preTokens")),
            "post_tokens": meta.get("post_tokens", meta.get("postTokens")),
            "micro": subtype == "microcompact_boundary", "subtype": subtype}, raw=msg)
    payload = {"subtype": subtype}
    if data.get("session_id"):
        payload["session_id"] = data["session_id"]
    return Event("system", subtype, payload=payload, raw=msg)


def tool_summary(inp: dict[str, Any]) -> str:
    """A tool call in one short line: its file_path, command or pattern (else its input), ≤ 200 chars."""
    for key in ("file_path", "command", "pattern"):
        value = inp.get(key) if isinstance(inp, dict) else None
        if value:
            return " ".join(str(value).split())[:TOOL_TEXT_MAX]
    if isinstance(inp, dict):
        for key in ("description", "question", "path", "url", "query", "prompt"):
            if inp.get(key):
                return " ".join(str(inp[key]).split())[:TOOL_TEXT_MAX]
    return ""


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, dict):
                if item.get("type") == "text":
                    parts.append(str(item.get("text", "")))
                else:
                    parts.append(f"[{item.get('type', 'block')}]")
            else:
                parts.append(str(item))
        return "\n".join(parts)
    return str(content)

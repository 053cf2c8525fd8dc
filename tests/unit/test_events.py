"""Event and normalize(): the SDK's message stream flattened into the one shape a UI knows."""

from __future__ import annotations

from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    SystemMessage,
    TaskNotificationMessage,
    TaskStartedMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from claude_agent_sdk.types import ConversationResetMessage, StreamEvent

from flower.core.events import EVENT_KINDS, Event, normalize

USAGE = {"input_tokens": 10, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200, "output_tokens": 7}


def test_fields_defaults_and_str():
    ev = Event("text")
    assert (ev.kind, ev.text, ev.tool, ev.payload, ev.raw, ev.step) == ("text", "", "", {}, None, "")
    assert str(ev) == "<text>"
    assert str(Event("text", "你好")) == "你好"
    assert str(Event("tool_call", "ls -la", "Bash")) == "[Bash] ls -la"
    assert Event("a").payload is not Event("a").payload


def test_step_is_a_keyword_beside_the_reference_fields():
    ev = Event("step", "干活", payload={"index": 0}, step="干活")
    assert (ev.kind, ev.text, ev.tool, ev.payload, ev.step) == ("step", "干活", "", {"index": 0}, "干活")


def test_the_fifteen_kinds():
    assert len(EVENT_KINDS) == 15
    assert set(EVENT_KINDS) == {"text", "thinking", "tool_call", "tool_result", "task", "system", "reset", "result",
                                "error", "prompt", "unknown", "retry", "step", "handoff", "ask"}


def test_assistant_blocks_and_the_common_payload():
    msg = AssistantMessage(
        content=[TextBlock("先看看"), ThinkingBlock("想一下", "sig"),
                 ToolUseBlock("tu1", "Bash", {"command": "ls   -la\n" + "x" * 300, "description": "list"})],
        model="claude", usage=USAGE)
    text, thinking, call = normalize(msg)
    assert (text.kind, text.text) == ("text", "先看看")
    assert text.payload == {"subagent": False, "context": 1210}  # input + cache read + cache creation, no output
    assert (thinking.kind, thinking.text) == ("thinking", "想一下")
    assert call.kind == "tool_call" and call.tool == "Bash" and call.text.startswith("ls -la x")
    assert len(call.text) == 200 and call.payload["id"] == "tu1" and call.payload["input"]["description"] == "list"
    assert str(call).startswith("[Bash] ls -la")


def test_a_subagent_s_message_says_so():
    msg = AssistantMessage(content=[TextBlock("子代理说")], model="claude", parent_tool_use_id="tu9")
    (ev,) = normalize(msg)
    assert ev.payload == {"subagent": True, "parent_tool_use_id": "tu9", "context": 0}


def test_a_synthetic_api_error_is_one_error_event_never_text():
    msg = AssistantMessage(content=[TextBlock("API Error: Connection error.")], model="<synthetic>")
    (ev,) = normalize(msg)
    assert ev.kind == "error" and ev.payload["synthetic"] is True and ev.raw is msg


def test_user_messages_are_prompts_and_tool_results():
    (p,) = normalize(UserMessage("做 X"))
    assert (p.kind, p.text, p.payload["subagent"]) == ("prompt", "做 X", False)
    brief, result = normalize(UserMessage([TextBlock("任务书"), ToolResultBlock("tu1", "y" * 900, True)],
                                          parent_tool_use_id="tu0"))
    assert brief.kind == "prompt" and brief.payload["subagent"] is True
    assert result.kind == "tool_result" and len(result.text) == 500
    assert result.payload["tool_use_id"] == "tu1" and result.payload["is_error"] is True
    (listed,) = normalize(UserMessage([ToolResultBlock("tu2", [{"type": "text", "text": "ok"}, {"type": "image"}])]))
    assert listed.text == "ok\n[image]" and listed.payload["is_error"] is False


def test_result_system_task_reset_unknown():
    res = ResultMessage("success", 10, 5, False, 3, "sess-1", total_cost_usd=0.25)
    (r,) = normalize(res)
    assert (r.kind, r.text) == ("result", "success")
    assert r.payload == {"session_id": "sess-1", "cost_usd": 0.25, "num_turns": 3, "is_error": False}

    (init,) = normalize(SystemMessage("init", {"session_id": "sess-1", "tools": []}))
    assert (init.kind, init.text, init.payload["session_id"]) == ("system", "init", "sess-1")

    started = TaskStartedMessage("task_started", {}, task_id="t1", description="写代码", uuid="u", session_id="s")
    done = TaskNotificationMessage("task_notification", {}, task_id="t1", status="completed", output_file="",
                                   summary="好了", uuid="u", session_id="s")
    (a,), (b,) = normalize(started), normalize(done)
    assert (a.kind, a.text, a.payload["kind"], a.payload["description"]) == ("task", "", "TaskStartedMessage", "写代码")
    assert b.payload["kind"] == "TaskNotificationMessage" and b.payload["status"] == "completed"

    compact = SystemMessage("compact_boundary", {"compact_metadata": {"trigger": "auto", "pre_tokens": 900,
                                                                      "post_tokens": 100}})
    (c,) = normalize(compact)
    assert c.kind == "reset" and c.payload == {"trigger": "auto", "pre_tokens": 900, "post_tokens": 100,
                                               "micro": False, "subtype": "compact_boundary"}
    (m,) = normalize(SystemMessage("microcompact_boundary", {}))
    assert m.kind == "reset" and m.payload["micro"] is True
    (z,) = normalize(ConversationResetMessage("new-conv", "u", "sess-1"))
    assert z.kind == "reset" and z.payload["subtype"] == "conversation_reset"

    (u,) = normalize(StreamEvent("u", "s", {"type": "ping"}))
    assert u.kind == "unknown" and u.payload["type"] == "StreamEvent"
    assert normalize(AssistantMessage(content=[], model="claude")) == []

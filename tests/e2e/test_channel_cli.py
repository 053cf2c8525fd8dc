"""HumanChannel through the real CLI: the model's ask/inbox calls reach a person via a UI (push or pull)
or the mailbox folder, and the answer comes back as the tool result."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import ResultMessage

from flower.core.agent import AgentSpec, build_options
from flower.core.channel import HumanChannel, MailboxAnswers
from flower.core.events import Event
from flower.core.roles import coordinator
from flower.testing import Rule, ScriptedModel, say, tool

pytestmark = pytest.mark.cli

ASK = HumanChannel.tool_name
INBOX = HumanChannel.inbox_name


def _options(ch: HumanChannel, ws: Path) -> Any:
    return build_options(AgentSpec("t", "", allowed_tools=ch.tool_names, mcp_servers=ch.mcp_servers()), cwd=ws)


async def _person(box: Path, answer: str) -> dict[str, Any]:
    """The other side: wait for the question file, answer it, return what was asked."""
    deadline = time.monotonic() + 60
    while not (pending := MailboxAnswers.pending(box)):
        assert time.monotonic() < deadline, "the question never reached the mailbox"
        await asyncio.sleep(0.05)
    assert MailboxAnswers.answer(box, pending[0]["id"], answer)
    return pending[0]


async def test_the_answer_reaches_the_model_as_the_tool_result(workspace: Path, tmp_path: Path):
    box, log = tmp_path / "mailbox", tmp_path / "notes" / "问答记录.md"
    ch = HumanChannel(log_path=log, timeout_s=60, answers=MailboxAnswers(box, poll_s=0.05))
    rules = [Rule(tool(ASK, {"question": "哪个数据库?", "options": ["sqlite", "postgres"]}), prompt="pick a db"),
             Rule(say("ok"), result="sqlite")]
    with ScriptedModel(rules) as model:
        person = asyncio.create_task(_person(box, "1"))  # by number: the model reads the option itself
        msgs = await model.collect("pick a db", _options(ch, workspace))
        asked = await person
    assert asked["question"] == "哪个数据库?" and asked["options"] == ["sqlite", "postgres"]
    assert isinstance(msgs[-1], ResultMessage) and msgs[-1].result == "ok"
    last = model.conversation[-1]
    assert last.results and not last.results[0]["is_error"] and last.result_text.strip() == "sqlite"
    assert ASK in model.conversation[0].tools and INBOX in model.conversation[0].tools
    assert MailboxAnswers.pending(box) == [] and not list((box / "answers").iterdir())
    text = log.read_text()
    assert "哪个数据库?" in text and "answered" in text and "选了第 1 项" in text
    assert ch.asked == 1 and model.unmatched == []


async def test_with_timeout_zero_the_model_is_told_at_once_that_nobody_answers(workspace: Path, tmp_path: Path):
    box = tmp_path / "mailbox"
    ch = HumanChannel(timeout_s=0, answers=MailboxAnswers(box))
    rules = [Rule(tool(ASK, {"question": "要不要加缓存?"}), prompt="work"),
             Rule(say("decided myself"), result="没有人")]
    with ScriptedModel(rules) as model:
        started = time.monotonic()
        msgs = await model.collect("work unattended", _options(ch, workspace))
        elapsed = time.monotonic() - started
    assert msgs[-1].result == "decided myself"
    last = model.conversation[-1].result_text
    assert "不会有人回答" in last and "自己做决定" in last and "假设" in last
    assert not (box / "questions").exists()  # nothing was even posted
    assert elapsed < 30


async def test_an_unanswered_ask_times_out_and_the_model_is_told_so(workspace: Path, tmp_path: Path):
    box, log = tmp_path / "mailbox", tmp_path / "问答记录.md"
    ch = HumanChannel(log_path=log, timeout_s=1, answers=MailboxAnswers(box, poll_s=0.05))
    rules = [Rule(tool(ASK, {"question": "在吗?"}), prompt="go"), Rule(say("on my own"), result="没有人回答")]
    with ScriptedModel(rules) as model:
        msgs = await model.collect("go", _options(ch, workspace))
    assert msgs[-1].result == "on my own"
    assert "等了 1 秒" in model.conversation[-1].result_text and "假设" in model.conversation[-1].result_text
    assert MailboxAnswers.pending(box) == [] and "· timeout" in log.read_text()


async def test_max_asks_spent_tells_the_model_without_asking(workspace: Path, tmp_path: Path):
    box = tmp_path / "mailbox"
    ch = HumanChannel(max_asks=1, timeout_s=60, answers=MailboxAnswers(box, poll_s=0.05))
    rules = [Rule(tool(ASK, {"question": "第一问"}), prompt="go"),
             Rule(tool(ASK, {"question": "第二问"}), result="好的"),
             Rule(say("fine"), result="提问次数已用完")]
    with ScriptedModel(rules) as model:
        person = asyncio.create_task(_person(box, "好的"))
        msgs = await model.collect("go", _options(ch, workspace))
        await person
    assert msgs[-1].result == "fine"
    assert "最多 1 次" in model.conversation[-1].result_text and ch.asked == 1


async def test_inbox_returns_a_posted_message_once(workspace: Path, tmp_path: Path):
    box = tmp_path / "mailbox"
    ch = HumanChannel(timeout_s=0, answers=MailboxAnswers(box))
    MailboxAnswers.post(box, "顺便把日志级别调成 debug")
    rules = [Rule(tool(INBOX, {}), prompt="check"),
             Rule(tool(INBOX, {}), result="日志级别"),
             Rule(say("nothing more"), result="没有新消息")]
    with ScriptedModel(rules) as model:
        msgs = await model.collect("check your inbox", _options(ch, workspace))
    assert msgs[-1].result == "nothing more"
    first, second = model.conversation[1].result_text, model.conversation[2].result_text
    assert "顺便把日志级别调成 debug" in first and second.strip() == "没有新消息"
    assert model.unmatched == []


async def test_a_slow_answer_comes_back_inline_not_as_a_background_task(workspace: Path, tmp_path: Path):
    """The CLI moves a long MCP call to a background task after a delay; a call waiting on a person must not be.

    The delay is shortened to 1 s through the CLI's own knobs; without disableAutoBackground the
    model would read "moved to the background" here instead of the answer.
    """
    box = tmp_path / "mailbox"
    ch = HumanChannel(timeout_s=60, answers=MailboxAnswers(box, poll_s=0.05))
    servers = ch.mcp_servers()
    assert servers["human"]["disableAutoBackground"] is True and servers["human"]["alwaysLoad"] is True
    spec = AgentSpec("t", "", allowed_tools=ch.tool_names, mcp_servers=servers,
                     env={"CLAUDE_CODE_MCP_AUTO_BACKGROUND_MS": "1000", "CLAUDE_AUTO_BACKGROUND_TASKS": "1"})

    async def slow() -> None:
        await asyncio.sleep(3)
        await _person(box, "postgres")

    rules = [Rule(tool(ASK, {"question": "哪个数据库?", "options": ["sqlite", "postgres"]}), prompt="db"),
             Rule(say("ok"), result="postgres")]
    with ScriptedModel(rules) as model:
        person = asyncio.create_task(slow())
        msgs = await model.collect("db", build_options(spec, cwd=workspace))
        await person
    assert msgs[-1].result == "ok"
    assert model.conversation[-1].result_text.strip() == "postgres" and model.unmatched == []


async def test_pull_mode_a_ui_answers_without_any_mailbox(workspace: Path):
    """The doc's interaction layer: a coroutine pulls questions with next_ask() and answers them."""
    ch = HumanChannel(timeout_s=60)
    rules = [Rule(tool(ASK, {"question": "用哪个端口?", "options": ["8080", "9000"]}), prompt="port"),
             Rule(say("ok"), result="9000")]
    seen: list[Any] = []

    async def ui() -> None:
        q = await ch.next_ask()
        assert q is not None
        seen.append((q.question, q.options, q.state))
        assert ch.answer(q.id, "2")

    with ScriptedModel(rules) as model:
        answering = asyncio.create_task(ui())
        msgs = await model.collect("port", _options(ch, workspace))
        await answering
    assert seen == [("用哪个端口?", ["8080", "9000"], "asked")]
    assert msgs[-1].result == "ok" and model.conversation[-1].result_text.strip() == "9000"
    assert ch.asks[0].state == "answered" and ch.asks[0].choice == 1 and ch.pending() == []


async def test_the_coordinator_can_use_both_tools_in_accept_edits(workspace: Path):
    """coordinator(channel=) pre-approves ask AND inbox: the CLI refuses an unlisted MCP tool even in acceptEdits.

    Push mode: the UI sees Event("ask") (the mail first, then the question) and answers from its callback.
    """
    events: list[Event] = []

    def ui(ev: Event) -> None:
        events.append(ev)
        if ev.payload.get("state") == "asked":
            ch.answer(ev.payload["id"], "按方案 B")

    ch = HumanChannel(on_event=ui, timeout_s=60)
    spec = coordinator("协调者", "", {}, channel=ch, glance=False)
    assert spec.permission_mode == "acceptEdits" and set(ch.tool_names) <= set(spec.allowed_tools)
    ch.send("顺便:周五前要交")  # said before the model looks: waits in the inbox
    rules = [Rule(tool(INBOX, {}), prompt="plan"),
             Rule(tool(ASK, {"question": "A 还是 B?"}), result="周五前要交"),
             Rule(say("done"), result="按方案 B")]
    with ScriptedModel(rules) as model:
        msgs = await model.collect("plan the work", build_options(spec, cwd=workspace))
    assert msgs[-1].result == "done" and model.unmatched == []
    inbox_result, ask_result = model.conversation[1], model.conversation[2]
    assert not inbox_result.results[0]["is_error"] and "周五前要交" in inbox_result.result_text
    assert not ask_result.results[0]["is_error"] and ask_result.result_text.strip() == "按方案 B"
    kinds = [(e.kind, e.payload.get("kind"), e.payload.get("state")) for e in events]
    assert kinds == [("ask", "mail", None), ("ask", None, "asked"), ("ask", None, "answered")]
    assert ch.pending_mail() == [] and ch.ui_errors == []


async def test_a_declined_question_and_an_empty_one_are_told_to_the_model(workspace: Path):
    ch = HumanChannel(on_event=lambda ev: ev.payload.get("state") == "asked" and ch.decline(ev.payload["id"], "别问我"),
                      timeout_s=60)
    rules = [Rule(tool(ASK, {"question": "  "}), prompt="go"),
             Rule(tool(ASK, {"question": "真的要删吗?"}), error=True),
             Rule(say("decided"), result="跳过了这个问题")]
    with ScriptedModel(rules) as model:
        msgs = await model.collect("go", _options(ch, workspace))
    assert msgs[-1].result == "decided"
    empty, declined = model.conversation[1], model.conversation[2]
    assert empty.results[0]["is_error"] and "question 不能为空" in empty.result_text
    assert "跳过了这个问题:别问我" in declined.result_text and "自己做决定" in declined.result_text
    assert [a.state for a in ch.asks] == ["invalid", "declined"] and ch.asked == 1

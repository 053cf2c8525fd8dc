"""HumanChannel through the real CLI: the model's ask/inbox calls reach a person via the mailbox folder."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import ResultMessage

from flower.core.agent import AgentSpec, build_options
from flower.core.channel import HumanChannel, MailboxAnswers
from flower.testing import Rule, ScriptedModel, say, tool

pytestmark = pytest.mark.cli

ASK = HumanChannel.tool_name
INBOX = HumanChannel.inbox_tool_name


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

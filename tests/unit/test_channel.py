"""HumanChannel: ask states, push/pull answering, mail, the Q&A log, amend-once, mailbox and terminal sources."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flower.core.channel import (
    DECLINED,
    OVER_BUDGET,
    TIMEOUT,
    Ask,
    ChannelClosed,
    HumanChannel,
    Mail,
    MailboxAnswers,
    pick,
)
from flower.core.events import Event
from flower.docs.brief import Brief


async def _answer_when_asked(box: Path, text: str, *, delay: float = 0.0) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while not (pending := MailboxAnswers.pending(box)):
        assert time.monotonic() < deadline, "no question was posted"
        await asyncio.sleep(0.01)
    await asyncio.sleep(delay)
    MailboxAnswers.answer(box, pending[0]["id"], text)
    return pending[0]


def _channel(tmp_path: Path, **kw: Any) -> tuple[HumanChannel, Path, Path]:
    box, log = tmp_path / "box", tmp_path / "notes" / "deep" / "问答记录.md"
    kw.setdefault("timeout_s", 10)
    return HumanChannel(log_path=log, answers=MailboxAnswers(box, poll_s=0.01), **kw), box, log


def _leftovers(box: Path) -> list[str]:
    return sorted(p.name for p in box.rglob("*") if p.is_file())


# -- picking an option -------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("1", 0), ("2", 1), (" 2. ", 1), ("2)", 1), ("第2个", 1), ("postgres", 1), ("  SQLite ", 0),
    ("3", None), ("0", None), ("用 postgres 吧", None), ("", None),
])
def test_pick_by_number_or_exact_text(text, expected):
    assert pick(text, ["sqlite", "postgres"]) == expected


def test_pick_without_options_is_none():
    assert pick("1", None) is None and pick("1", []) is None


# -- asking through the mailbox ----------------------------------------------
async def test_answered_question_is_logged_and_cleaned_up(tmp_path):
    ch, box, log = _channel(tmp_path)
    person = asyncio.create_task(_answer_when_asked(box, "2"))
    a = await ch.ask("哪个数据库?", ["sqlite", "postgres"])
    asked = await person
    assert (a.state, a.answer, a.choice, a.answered, a.text) == ("answered", "2", 1, True, "2")
    assert ch.reply_text(a) == "postgres" and ch.pending() == []
    assert asked["question"] == "哪个数据库?" and asked["options"] == ["sqlite", "postgres"]
    assert asked["id"] and asked["asked_at"] and asked["timeout_s"] == 10
    assert _leftovers(box) == [] and ch.asked == 1
    text = log.read_text()
    assert text.startswith("# 问答记录")
    assert re.search(r"### #1-\w+ 问 · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n\n> 哪个数据库\?\n\n1\. sqlite\n2\. postgres",
                     text)
    assert re.search(r"### #1-\w+ 答 · [\d: -]+ · answered\n\n> 2\n\n\(选了第 2 项\)", text)
    assert ch.transcript() == text  # the same record, in memory


async def test_free_text_answer_has_no_choice_and_reaches_the_model_verbatim(tmp_path):
    ch, box, _ = _channel(tmp_path)
    asyncio.create_task(_answer_when_asked(box, "都不要,用文件"))
    a = await ch.ask("哪个数据库?", ["sqlite", "postgres"])
    assert a.state == "answered" and a.choice is None and ch.reply_text(a) == "都不要,用文件"


@pytest.mark.parametrize("timeout_s", [0, -1])
async def test_timeout_zero_or_less_never_waits_and_posts_nothing(tmp_path, timeout_s):
    ch, box, log = _channel(tmp_path, timeout_s=timeout_s)
    started = time.monotonic()
    a = await ch.ask("要不要加缓存?")
    assert (a.state, a.answer) == ("timeout", "") and time.monotonic() - started < 0.5
    assert not box.exists() and ch.asked == 0
    reply = ch.reply_text(a)
    assert "没有人值守" in reply and "不会有人回答" in reply and "自己做决定" in reply and "假设" in reply
    assert "· timeout" in log.read_text() and "timeout_s=0" in log.read_text()


async def test_nobody_answers_within_timeout(tmp_path):
    ch, box, log = _channel(tmp_path, timeout_s=0.3)
    started = time.monotonic()
    a = await ch.ask("在吗?")
    assert a.state == "timeout" and 0.25 < time.monotonic() - started < 3
    assert _leftovers(box) == []  # the stale question is withdrawn
    assert "没有人回答(等了 0.3 秒)" in ch.reply_text(a) and "(没有人回答)" in log.read_text()
    assert 0.25 < a.waited_s < 3 and ch.pending() == []


async def test_timeout_none_waits_for_a_late_answer(tmp_path):
    ch, box, _ = _channel(tmp_path, timeout_s=None)
    asyncio.create_task(_answer_when_asked(box, "好", delay=0.4))
    assert (await ch.ask("等我?")).text == "好"


async def test_max_asks_limits_questions_that_reach_the_person(tmp_path):
    ch, box, log = _channel(tmp_path, max_asks=1)
    assert ch.remaining == 1
    asyncio.create_task(_answer_when_asked(box, "ok"))
    assert (await ch.ask("第一问")).state == "answered" and ch.remaining == 0
    started = time.monotonic()
    second = await ch.ask("第二问")
    assert second.state == "over_budget" and ch.asked == 1 and time.monotonic() - started < 0.5  # refused, no wait
    assert MailboxAnswers.pending(box) == []
    assert "最多 1 次" in ch.reply_text(second) and "· over_budget" in log.read_text()
    assert "第二问" in log.read_text()  # even a question never sent is on record


async def test_max_asks_zero_asks_nobody_and_none_means_no_limit(tmp_path):
    ch, box, _ = _channel(tmp_path, max_asks=0)
    assert (await ch.ask("?")).state == "over_budget" and not box.exists() and ch.remaining == 0
    assert HumanChannel(timeout_s=0).remaining == -1  # None: unlimited, shown as -1


async def test_close_ends_a_pending_ask_and_later_ones(tmp_path):
    ch, box, log = _channel(tmp_path, timeout_s=None)
    pending = asyncio.create_task(ch.ask("还在吗?"))
    while not MailboxAnswers.pending(box):
        await asyncio.sleep(0.01)
    ch.close()
    first = await pending
    assert first.state == "declined" and first.answer == "提问渠道已关闭"
    again = await ch.ask("再问一次")
    assert again.state == "declined" and "提问渠道已关闭" in ch.reply_text(again) and _leftovers(box) == []


async def test_cancelling_the_caller_propagates_and_withdraws_the_question(tmp_path):
    ch, box, log = _channel(tmp_path, timeout_s=None)
    task = asyncio.create_task(ch.ask("?"))
    while not MailboxAnswers.pending(box):
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _leftovers(box) == [] and "被取消" in log.read_text() and not ch.closed
    assert ch.asks[-1].state == "declined" and ch.pending() == []


async def test_an_empty_question_is_invalid_not_an_exception(tmp_path):
    ch, box, _ = _channel(tmp_path)
    a = await ch.ask("   ")
    assert a.state == "invalid" and not box.exists() and ch.asked == 0
    assert "question 不能为空" in ch.reply_text(a)


class _Broken:
    async def get(self, question, options, timeout):
        raise OSError("disk full")

    def inbox(self):
        return []

    def take_interrupt(self):
        return None


class _Gone(_Broken):
    async def get(self, question, options, timeout):
        raise ChannelClosed("nobody there")


async def test_a_broken_source_is_logged_not_raised(tmp_path):
    ch = HumanChannel(log_path=tmp_path / "log.md", answers=_Broken())
    a = await ch.ask("?")
    assert a.state == "declined" and "自己做决定" in ch.reply_text(a)
    assert "disk full" in (tmp_path / "log.md").read_text() and not ch.closed


async def test_a_source_that_closes_closes_the_channel(tmp_path):
    ch = HumanChannel(log_path=tmp_path / "log.md", answers=_Gone())
    assert (await ch.ask("?")).state == "declined" and ch.closed


# -- malformed answers ---------------------------------------------------------
@pytest.mark.parametrize("bad", ["{not json", '{"answer": "sqlite"}', '["sqlite"]', '{"text": 3}'])
async def test_a_malformed_answer_file_is_reported_and_not_taken_as_an_answer(tmp_path, bad):
    ch, box, log = _channel(tmp_path, timeout_s=5)

    async def person() -> None:
        q = await _wait_question(box)
        (box / "answers").mkdir(parents=True, exist_ok=True)
        (box / "answers" / f"{q['id']}.json").write_text(bad)
        while "格式不对" not in (log.read_text() if log.exists() else ""):
            await asyncio.sleep(0.01)
        MailboxAnswers.answer(box, q["id"], "sqlite")  # the person fixes it; the ask still stands

    asyncio.create_task(person())
    a = await ch.ask("哪个数据库?", ["sqlite", "postgres"])
    assert (a.state, a.answer, a.choice) == ("answered", "sqlite", 0)
    text = log.read_text()
    assert "答案文件" in text and "按未回答处理" in text and '{"text": "你的回答"}' in text
    assert _leftovers(box) == [next(p.name for p in (box / "answers").iterdir())]  # the .bad file, kept for a look
    assert _leftovers(box)[0].endswith(".json.bad")


async def test_a_malformed_answer_alone_ends_as_timeout(tmp_path):
    ch, box, log = _channel(tmp_path, timeout_s=0.5)

    async def person() -> None:
        q = await _wait_question(box)
        (box / "answers").mkdir(parents=True, exist_ok=True)
        (box / "answers" / f"{q['id']}.json").write_text("oops")

    asyncio.create_task(person())
    assert (await ch.ask("?")).state == "timeout"
    assert "格式不对" in log.read_text()


async def test_malformed_answer_without_a_log_goes_to_structlog(tmp_path):
    errors: list[str] = []
    box = tmp_path / "box"
    ch = HumanChannel(timeout_s=0.5, answers=MailboxAnswers(box, poll_s=0.01, on_error=errors.append))

    async def person() -> None:
        q = await _wait_question(box)
        (box / "answers").mkdir(parents=True, exist_ok=True)
        (box / "answers" / f"{q['id']}.json").write_text("oops")

    asyncio.create_task(person())
    assert (await ch.ask("?")).state == "timeout" and errors and "格式不对" in errors[0]
    assert ch.log_path is None


async def _wait_question(box: Path) -> dict[str, Any]:
    while not (pending := MailboxAnswers.pending(box)):
        await asyncio.sleep(0.01)
    return pending[0]


# -- inbox and interrupt ------------------------------------------------------
def test_inbox_returns_messages_in_order_once_and_logs_them(tmp_path):
    ch, box, log = _channel(tmp_path)
    assert ch.inbox() == []
    MailboxAnswers.post(box, "先别动数据库")
    MailboxAnswers.post(box, "测试用 pytest")
    (box / "inbox" / "zz-by-hand.txt").write_text("手写的一条\n")
    assert ch.inbox() == ["先别动数据库", "测试用 pytest", "手写的一条"]
    assert ch.inbox() == [] and _leftovers(box) == []
    assert log.read_text().count("主动消息") == 3


def test_a_malformed_inbox_file_is_reported_and_skipped(tmp_path):
    ch, box, log = _channel(tmp_path)
    (box / "inbox").mkdir(parents=True)
    (box / "inbox" / "1.json").write_text("{broken")
    MailboxAnswers.post(box, "好的那条")
    assert ch.inbox() == ["好的那条"]
    assert "主动消息文件" in log.read_text() and (box / "inbox" / "1.json.bad").exists()


def test_interrupt_is_taken_once(tmp_path):
    ch, box, log = _channel(tmp_path)
    assert ch.take_interrupt() is None
    MailboxAnswers.interrupt(box, "停一下,先修登录")
    assert ch.take_interrupt() == "停一下,先修登录"
    assert ch.take_interrupt() is None and "打断" in log.read_text()


def test_an_interrupt_without_a_word_is_told_apart_from_none(tmp_path):
    ch, box, log = _channel(tmp_path)
    MailboxAnswers.interrupt(box, "")  # without a word: still an interrupt, told apart from "none" by ""
    assert ch.take_interrupt() == "" and ch.take_interrupt() is None and "(没有留话)" in log.read_text()


def test_an_interrupt_written_by_hand_as_plain_text_still_counts(tmp_path):
    ch, box, log = _channel(tmp_path)
    box.mkdir()
    (box / "interrupt.json").write_text("stop now\n")
    assert ch.take_interrupt() == "stop now" and "按原文" in log.read_text()


def test_answer_helper_says_whether_the_question_was_open(tmp_path):
    box = tmp_path / "box"
    assert MailboxAnswers.answer(box, "nope", "x") is False
    with pytest.raises(ValueError):
        MailboxAnswers.answer(box, "../evil", "x")


def test_writes_leave_no_temp_files(tmp_path):
    box = tmp_path / "box"
    MailboxAnswers.post(box, "a")
    MailboxAnswers.interrupt(box, "b")
    MailboxAnswers.answer(box, "q1", "c")
    names = [p.name for p in box.rglob("*") if p.is_file()]
    assert len(names) == 3 and not any(n.startswith(".") or n.endswith(".tmp") for n in names)
    assert json.loads((box / "answers" / "q1.json").read_text())["text"] == "c"


# -- amend ---------------------------------------------------------------------
def test_amend_appends_once(tmp_path):
    brief = tmp_path / "需求.md"
    brief.write_text("## 目标\n做 X\n\n## 验收标准\n- 能跑\n\n## 边界\n不动 CI\n\n## 未知与假设\n无\n")
    ch = HumanChannel(amend_path=brief, log_path=tmp_path / "log.md", timeout_s=0)
    assert ch.amend_path == brief and ch.log_path == tmp_path / "log.md"
    assert ch.amend("另外要支持导出 CSV", label="唤醒时追加") is True
    after = brief.read_text()
    assert re.search(r"\n\n## 唤醒时追加\([\d: -]+\)\n\n另外要支持导出 CSV\n$", after)
    assert ch.amend("另外要支持导出 CSV", label="唤醒时追加") is False
    assert ch.amend("  另外要支持导出 CSV \n") is False
    assert brief.read_text() == after
    assert ch.amend("") is False
    assert ch.amend("还有一件事") is True and "## 运行中补充(" in brief.read_text()
    b = Brief.load(brief)
    assert b is not None and b.complete() and "另外要支持导出 CSV" in b.prompt_block()
    assert "唤醒时追加" in (tmp_path / "log.md").read_text()


def test_amend_creates_the_file_and_says_false_when_it_wrote_nothing(tmp_path):
    target = tmp_path / "new" / "brief.md"
    assert HumanChannel(amend_path=target, timeout_s=0).amend("hello") is True
    assert target.read_text().startswith("## 运行中补充(") and target.read_text().endswith("\n\nhello\n")
    assert HumanChannel(timeout_s=0).amend("x") is False  # no path configured: nothing written, no error
    blocked = tmp_path / "file"
    blocked.write_text("")
    log = tmp_path / "log.md"
    assert HumanChannel(amend_path=blocked / "brief.md", log_path=log, timeout_s=0).amend("x") is False  # OSError
    assert "没能把补充写进" in log.read_text()


# -- the MCP server --------------------------------------------------------------
def test_tool_names_and_server_config():
    ch = HumanChannel(timeout_s=30)
    assert ch.tool_name == "mcp__human__ask" and ch.inbox_name == "mcp__human__inbox"
    assert ch.tool_names == ["mcp__human__ask", "mcp__human__inbox"]
    servers = ch.mcp_servers()
    assert list(servers) == ["human"]
    cfg = servers["human"]
    assert cfg["type"] == "sdk" and cfg["name"] == "human" and cfg["instance"] is not None
    assert cfg["alwaysLoad"] is True and cfg["disableAutoBackground"] is True
    assert cfg["timeout"] == 90_000  # our 30 s plus a margin: the CLI never cuts an ask short
    assert HumanChannel(timeout_s=None).mcp_servers()["human"]["timeout"] == 2_147_483_647


# -- Ask and Mail ------------------------------------------------------------------
def test_ask_defaults_and_its_event():
    before = time.time()
    a = Ask("q1", "哪个?")
    assert (a.options, a.state, a.answer) == ([], "asked", "") and before <= a.asked_at <= time.time()
    assert a.waited_s >= 0 and a.choice is None and not a.answered
    a.options = ["x", "y"]
    ev = a.event(remaining=3)
    assert isinstance(ev, Event) and ev.kind == "ask" and ev.text == "哪个?" and ev.raw is a
    assert ev.payload == {"id": "q1", "options": ["x", "y"], "state": "asked", "answer": "", "remaining": 3,
                          "asked_at": a.asked_at}
    assert a.event().payload["remaining"] == 0


def test_mail_event_is_an_ask_event_of_kind_mail_without_options_or_remaining():
    m = Mail("m1", "顺便说一句")
    assert m.taken is False and m.sent_at <= time.time()
    ev = m.event()
    assert ev.kind == "ask" and ev.text == "顺便说一句" and ev.payload["kind"] == "mail" and ev.raw is m
    assert "options" not in ev.payload and "remaining" not in ev.payload


# -- push and pull -----------------------------------------------------------------
async def test_push_mode_the_ui_answers_from_its_callback():
    events: list[Event] = []

    def ui(ev: Event) -> None:
        events.append(ev)
        if ev.payload.get("state") == "asked":  # a pending question: answer it right away
            assert ch.answer(ev.payload["id"], "2")

    ch = HumanChannel(on_event=ui, timeout_s=5)
    a = await ch.ask("哪个数据库?", ["sqlite", "postgres"])
    assert (a.state, a.choice) == ("answered", 1) and ch.reply_text(a) == "postgres"
    assert [e.payload["state"] for e in events] == ["asked", "answered"]  # the UI also learns it is settled
    assert all(e.kind == "ask" and e.payload["id"] == a.id for e in events)
    assert ch.answer(a.id, "again") is False and ch.answer("nope", "x") is False  # no longer waiting


async def test_pull_mode_next_ask_and_answer_from_another_thread():
    ch = HumanChannel(timeout_s=5)
    assert await ch.next_ask(timeout=0.05) is None  # nothing asked: times out with None

    async def ui() -> str:
        q = await ch.next_ask()
        assert q is not None and q.state == "asked" and ch.pending() == [q]
        t = threading.Thread(target=lambda: ch.answer(q.id, "用 postgres"))  # e.g. a web backend's thread
        t.start()
        t.join()
        return q.id

    answering = asyncio.create_task(ui())
    a = await ch.ask("哪个数据库?")
    assert (a.state, a.answer, a.id) == ("answered", "用 postgres", await answering)


@pytest.mark.parametrize("timeout", [None, 30.0])
async def test_a_pull_cancelled_as_its_question_comes_ends_and_the_question_waits_for_the_next(
        timeout: float | None) -> None:
    """The question is handed to a waiting ``next_ask`` in the very pass that pull is cancelled (a UI shutting down).
    With a timeout, Python 3.11's ``asyncio.wait_for`` returned the question and dropped the cancel: a loop pulling
    questions never ended. Without one, the question went with the cancel and no later pull saw it."""
    ch = HumanChannel(timeout_s=5)
    pull = asyncio.create_task(ch.next_ask(timeout))
    await asyncio.sleep(0)  # the pull waits
    asking = asyncio.create_task(ch.ask("还要继续吗?"))
    await asyncio.sleep(0)  # the question was handed to the pull; the pull has not run since
    pull.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pull
    q = await ch.next_ask(timeout=1)
    assert q is not None and q.question == "还要继续吗?"
    assert ch.answer(q.id, "继续") is True
    assert (await asking).answer == "继续"


async def test_a_question_asked_before_anyone_pulls_waits_for_the_puller():
    ch = HumanChannel(timeout_s=5)
    asking = asyncio.create_task(ch.ask("先问了"))
    await asyncio.sleep(0.05)
    q = await ch.next_ask(timeout=1)
    assert q is not None and q.question == "先问了"
    assert ch.decline(q.id, "先跳过") is True and ch.decline(q.id) is False
    a = await asking
    assert a.state == "declined" and a.answer == "先跳过"
    reply = ch.reply_text(a)
    assert "跳过了这个问题:先跳过" in reply and "自己做决定" in reply


async def test_a_ui_answer_beats_a_slow_source_and_withdraws_its_question(tmp_path):
    ch, box, log = _channel(tmp_path, timeout_s=None)
    q = None

    async def ui() -> None:
        nonlocal q
        q = await ch.next_ask()
        while not MailboxAnswers.pending(box):
            await asyncio.sleep(0.01)
        ch.answer(q.id, "网页上答的")

    asyncio.create_task(ui())
    a = await ch.ask("谁先答?")
    assert a.answer == "网页上答的" and _leftovers(box) == []


async def test_a_failing_ui_callback_is_collected_not_raised():
    def ui(ev: Event) -> None:
        raise RuntimeError("render failed")

    ch = HumanChannel(on_event=ui, timeout_s=0)
    a = await ch.ask("?")
    assert a.state == "timeout" and ch.ui_errors and "render failed" in ch.ui_errors[0]


async def test_custom_texts_are_what_the_model_reads():
    ch = HumanChannel(timeout_s=0, max_asks=1, over_budget_text="别问了({max_asks})", timeout_text="没人在",
                      declined_text="跳过")
    assert (ch.over_budget_text, ch.timeout_text, ch.declined_text) == ("别问了({max_asks})", "没人在", "跳过")
    assert ch.reply_text(await ch.ask("a")) == "没人在"
    ch.timeout_s = 5
    ch.asked = 1
    assert ch.reply_text(await ch.ask("b")) == "别问了(1)"
    ch.close()
    assert ch.reply_text(await ch.ask("c")) == "跳过"
    assert "{max_asks}" in OVER_BUDGET and "{waited}" in TIMEOUT and "{reason}" in DECLINED


# -- send: the person speaks unasked -------------------------------------------------
async def test_send_makes_mail_for_the_inbox_the_ui_and_the_brief(tmp_path):
    brief = tmp_path / "需求.md"
    events: list[Event] = []
    ch = HumanChannel(on_event=events.append, amend_path=brief, log_path=tmp_path / "log.md", timeout_s=0)
    assert ch.send("  ") is None
    m = ch.send("接口要兼容旧版")
    assert isinstance(m, Mail) and m.text == "接口要兼容旧版" and ch.mail == [m] and ch.pending_mail() == [m]
    assert events[-1].payload["kind"] == "mail" and events[-1].text == "接口要兼容旧版"
    assert "## 运行中补充(" in brief.read_text() and "接口要兼容旧版" in brief.read_text()
    assert ch.inbox() == ["接口要兼容旧版"] and m.taken and ch.pending_mail() == [] and ch.inbox() == []
    assert "主动消息" in ch.transcript()


async def test_send_from_another_thread_lands_on_the_channel_loop():
    seen: list[tuple[str, bool]] = []
    loop_thread = threading.get_ident()
    ch = HumanChannel(on_event=lambda e: seen.append((e.text, threading.get_ident() == loop_thread)), timeout_s=5)

    async def ui() -> None:
        q = await ch.next_ask()
        t = threading.Thread(target=lambda: (ch.send("顺便:用 UTC"), ch.answer(q.id, "好")))
        t.start()
        t.join()

    asyncio.create_task(ui())
    a = await ch.ask("时区?")
    await asyncio.sleep(0.05)
    assert a.answer == "好" and ("顺便:用 UTC", True) in seen  # the UI callback ran on the loop's thread
    assert ch.inbox() == ["顺便:用 UTC"]


async def test_mailbox_messages_become_mail_and_amend_the_brief(tmp_path):
    brief = tmp_path / "需求.md"
    box = tmp_path / "box"
    events: list[Event] = []
    ch = HumanChannel(on_event=events.append, amend_path=brief, timeout_s=0, answers=MailboxAnswers(box))
    MailboxAnswers.post(box, "别动生产库")
    assert ch.inbox() == ["别动生产库"] and ch.mail[0].taken
    assert "别动生产库" in brief.read_text() and events[0].payload["kind"] == "mail"


# -- the parts behind the facade, and the Answers protocol's optional methods ------------------------

def test_optional_answer_methods_are_probed_like_the_sdk_probes_a_session_store(tmp_path: Path) -> None:
    from flower.core.answers import Answers
    from flower.core.channel import implements

    class Plain:  # duck-typed, required methods only
        async def get(self, question: str, options: list[str] | None, timeout: float | None) -> str | None:
            return None

        def inbox(self) -> list[str]:
            return []

    class Declared(Answers):  # subclasses the Protocol: inherits the "absent" default
        async def get(self, question: str, options: list[str] | None, timeout: float | None) -> str | None:
            return None

        def inbox(self) -> list[str]:
            return []

    mailbox = MailboxAnswers(tmp_path)
    assert not implements(Plain(), "take_interrupt") and not implements(Declared(), "take_interrupt")
    assert implements(mailbox, "take_interrupt")
    for source in (Plain(), Declared()):
        assert HumanChannel(timeout_s=0, answers=source).take_interrupt() is None
    ch = HumanChannel(timeout_s=0, answers=mailbox)
    assert mailbox.on_error == ch.note  # the on_error slot was filled with the log's note
    MailboxAnswers.interrupt(tmp_path, "停一下")
    assert ch.take_interrupt() == "停一下" and ch.take_interrupt() is None
    assert "打断" in ch.transcript() and "停一下" in ch.transcript()


async def test_the_ask_book_settles_once_from_any_thread() -> None:
    import threading

    from flower.core.asks import AskBook

    book = AskBook()
    a = book.new("要 A 还是 B?", ["A", "B"])
    done = book.wait_on(a, asyncio.get_running_loop())
    book.offer(a)
    assert await book.next(0) is a and book.pending() == [a]
    threading.Thread(target=lambda: book.settle(a, "answered", "2")).start()
    await asyncio.wait_for(done, 2)
    assert a.state == "answered" and a.choice == 1 and not book.settle(a, "timeout")
    book.forget(a)
    assert book.pending() == [] and await book.next(0) is None

"""The `flower` command's pieces without the CLI: argv, flag → starter_flow mapping, one-line errors,
what the screen prints for each event, and where a typed line goes."""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
from pathlib import Path

import pytest

from flower import cli
from flower.cli.go import _handoff_policy
from flower.cli.messages import t
from flower.cli.oracle import _tail_events
from flower.cli.screen import _gist
from flower.core.channel import HumanChannel
from flower.core.events import Event


@pytest.fixture(autouse=True)
def chinese(monkeypatch):
    """These checks read the Chinese screens (tests/unit/test_messages.py covers both languages)."""
    monkeypatch.setenv("FLOWER_LANG", "zh")


# -- argv ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, parsed", [
    ([], ["go"]),
    (["-v"], ["-v", "go"]),
    (["帮我做一个 X"], ["go", "帮我做一个 X"]),
    (["-w", "/tmp", "做 X"], ["-w", "/tmp", "go", "做 X"]),
    (["--workspace=/tmp", "做 X"], ["--workspace=/tmp", "go", "做 X"]),
    (["做 X", "--timeout", "0"], ["go", "做 X", "--timeout", "0"]),
    (["--timeout", "0", "做 X"], ["go", "--timeout", "0", "做 X"]),
    (["--new"], ["go", "--new"]),
    (["once", "hi"], ["once", "hi"]),
    (["run", "flows:main"], ["run", "flows:main"]),
    (["run"], ["run"]),
    (["go", "run"], ["go", "run"]),
    (["setup"], ["setup"]),
    (["status"], ["status"]),
    (["-r", "x", "ask", "到哪了"], ["-r", "x", "ask", "到哪了"]),
    (["--help"], ["--help"]),
    (["做 X", "-h"], ["做 X", "-h"]),
])
def test_the_default_subcommand_is_go(argv, parsed):
    assert cli.with_default_cmd(argv) == parsed


def test_flags_go_before_or_after_the_ask_and_its_words_may_sit_between_them():
    a = cli.parse(["帮我", "--rounds", "2", "做", "-w", "/tmp", "一个 X", "--timeout", "0"])
    b = cli.parse(["--timeout", "0", "-w", "/tmp", "帮我 做 一个 X", "--rounds", "2"])
    for args in (a, b):
        assert args.command == "go" and args.rounds == 2 and args.timeout == 0 and args.workspace == "/tmp"
        assert " ".join(args.ask) == "帮我 做 一个 X"
    assert cli.parse(["status", "-w", "/x", "-v"]).workspace == "/x"  # global flags after the subcommand
    assert cli.parse(["-w", "/x", "status"]).workspace == "/x"
    assert cli.parse(["go", "run"]).ask == ["run"]
    assert cli.parse(["ask", "到哪", "了"]).question == ["到哪", "了"]
    assert cli.parse([]).run_dir is None  # → <workspace>/runs


def test_every_go_flag_reaches_starter_flow():
    kw = cli.starter_kwargs(cli.parse(["x"]))
    assert kw == {"clarify_only": False, "goal": True, "rounds": 3, "judge_can_run": False, "max_asks": None,
                  "timeout_s": 1800.0, "isolate": False, "instructions": ""}
    kw = cli.starter_kwargs(cli.parse(["x", "--clarify-only", "--no-goal", "--rounds", "5", "--judge-can-run",
                                       "--asks", "0", "--timeout", "-3", "--isolate", "-i", "只用标准库"]))
    assert kw == {"clarify_only": True, "goal": False, "rounds": 5, "judge_can_run": True, "max_asks": 0,
                  "timeout_s": 0.0, "isolate": True, "instructions": "只用标准库"}
    assert cli.starter_kwargs(cli.parse(["x", "--asks", "-7"]))["max_asks"] is None
    assert cli.starter_kwargs(cli.parse(["x", "--asks", "4"]))["max_asks"] == 4
    assert cli.starter_kwargs(cli.parse(["x", "--timeout", "inf"]))["timeout_s"] is None  # wait forever
    args = cli.parse(["x", "--window", "200000", "--no-trim", "--new"])
    assert args.window == 200000 and args.no_trim and args.new
    policy = _handoff_policy(args)
    assert policy.window == 200000 and policy.at == 150000
    assert _handoff_policy(cli.parse(["x", "--no-handoff"])) is False
    assert _handoff_policy(cli.parse(["x"])) is True


# -- mistakes: one line -------------------------------------------------------------------------
@pytest.mark.parametrize("argv, says", [
    (["--rounds", "many", "x"], "--rounds 要一个整数"),
    (["--rounds", "0", "x"], "--rounds 至少是 1"),
    (["x", "--timeout", "soon"], "--timeout 要秒数"),
    (["x", "--timeout", "nan"], "--timeout"),
    (["--window", "0", "x"], "--window 至少是 1"),
    (["--asks", "1.5", "x"], "--asks 要一个整数"),
    (["x", "--frobnicate"], "不认识的参数:--frobnicate"),
    (["once", "-p", "yolo", "hi"], "--permission-mode"),
    (["once", "-b", "-1", "hi"], "--budget"),
    (["run"], "缺少参数:target"),
    (["-w"], "-w"),
])
def test_a_bad_flag_is_one_line_and_exit_2(capsys, argv, says):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("flower: ") and says in err, err


def _one_line(capsys: pytest.CaptureFixture[str], code: int, argv: list[str]) -> str:
    assert cli.main(argv) == code
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and out.err.startswith("flower: "), out
    assert "Traceback" not in out.err + out.out
    return out.err


def test_a_workspace_that_cannot_be_used_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    assert "不是文件夹" in _one_line(capsys, 1, ["-w", str(a_file), "做 X"])
    assert "建不了工作目录" in _one_line(capsys, 1, ["-w", str(a_file / "sub"), "做 X"])
    assert "不存在" in _one_line(capsys, 1, ["-w", str(tmp_path / "none"), "status"])
    assert "运行目录" in _one_line(capsys, 1, ["-r", str(a_file), "status"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_workflow_target_that_cannot_be_loaded_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(os.sys.path))
    (tmp_path / "cli_flows_a.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "cli_flows_b.py").write_text("def main():\n    return 42\n")
    assert "需要 模块:属性 形式" in _one_line(capsys, 1, ["run", "flows"])
    assert "找不到 nope.py" in _one_line(capsys, 1, ["run", "nope.py:main"])
    assert "导入 'cli_flows_a' 失败:RuntimeError: boom" in _one_line(capsys, 1, ["run", "cli_flows_a.py:main"])
    assert "'cli_flows_b' 里没有 'other'" in _one_line(capsys, 1, ["run", "cli_flows_b:other"])
    assert "不是 Workflow,而是 int" in _one_line(capsys, 1, ["run", "cli_flows_b.py:main"])


def test_once_fork_needs_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert "--resume" in _one_line(capsys, 2, ["once", "hi", "--fork"])


# -- the screen ---------------------------------------------------------------------------------
def _screen(**kw) -> tuple[cli.Screen, io.StringIO]:
    out = io.StringIO()
    return cli.Screen(out=out, **kw), out


def _ask(state: str, qid: str = "1", **more) -> Event:
    payload = {"id": qid, "options": ["Python", "Go"], "state": state, "answer": "", "remaining": -1}
    payload.update(more)
    return Event("ask", "用什么语言?", payload=payload)


def test_the_screen_shows_steps_dispatches_questions_and_handoffs():
    screen, out = _screen()
    for ev in [
        Event("step", "确认需求", payload={"index": 0, "total": 3, "resumed": False, "woke": 1}),
        _ask("asked", remaining=4),
        _ask("answered", answer="1"),
        _ask("timeout", qid="2"),  # --timeout 0: never waited
        _ask("asked", qid="3"), _ask("timeout", qid="3"),
        _ask("declined", qid="4"), _ask("over_budget", qid="5"),
        Event("step", "工作", payload={"index": 2, "total": 3, "resumed": True, "woke": 2}),
        Event("thinking", "先想想\n再派活", payload={"subagent": False}),
        Event("tool_call", "拆活", tool="Agent", payload={"id": "t1", "input": {"subagent_type": "coder",
                                                                               "description": "写 hello.py"}}),
        Event("tool_call", "/w/hello.py", tool="Write", payload={"subagent": True}),
        Event("text", "子代理的正文", payload={"subagent": True}),
        Event("tool_result", "x", payload={"tool_use_id": "t1"},
              raw=type("B", (), {"content": "[Subagent hand-back] ...\n## 结论\n写好了 hello.py\n## 证据\n跑过"})()),
        Event("tool_result", "command not found", payload={"is_error": True, "subagent": True}),
        Event("retry", "第 1 次失败,2s 后重试", payload={"error": "overloaded_error"}),
        Event("handoff", "", payload={"phase": "near", "used": 930_000, "at": 950_000}),
        Event("handoff", "", payload={"phase": "writing"}),
        Event("handoff", "", payload={"phase": "done", "degraded": True, "path": "/p/.flower/notes/交接-工作.md"}),
        Event("text", "\x1b[2J做完了\x1b[31m!\x07", payload={"subagent": False}),
        Event("ask", "顺便加个 README", payload={"kind": "mail"}),
    ]:
        screen.event(ev)
    text = out.getvalue()
    assert screen.errors == []
    expected = [
        "== 确认需求 (1/3) ==", "  ? 用什么语言?", "     1) Python", "     2) Go", "     (还能问 4 次)", "  + 1",
        "  ! 没人值守(--timeout 0)", "  ! 无人应答", "  . 已跳过", "  ! 提问额度用完",
        "== 工作 (3/3) ==", "<- 接着上次的会话", "~ 先想想 再派活", "> 派给 coder:写 hello.py",
        "  | * Write /w/hello.py", "<- 报告交回来了:写好了 hello.py", "  | x command not found",
        "~ 第 1 次失败,2s 后重试:overloaded_error", "# 上下文 930.0K,快到交接线 950.0K",
        "# 上下文满了 —— 写交接书准备换代", "x 交接没写成,用了降级版本", "<- 交接写在 /p/.flower/notes/交接-工作.md",
        "<- 新会话接手", "  做完了!", "+ 收到 (它下次查收件箱时会看到;没有确认书可落盘",
    ]
    at = [text.find(s) for s in expected]
    assert all(i >= 0 for i in at), [s for s, i in zip(expected, at) if i < 0]
    assert at == sorted(at)
    assert "子代理的正文" not in text, "a subagent's prose only with -v"
    assert "\x1b" not in text and "\x07" not in text, "what the model says cannot drive the terminal"


def test_the_screen_keeps_an_event_log_the_oracle_reads_back(tmp_path):
    screen, _ = _screen(events_path=tmp_path / "runs" / cli.EVENTS_FILE)
    screen.event(Event("step", "工作", payload={"index": 0, "total": 1, "resumed": False, "woke": 1}))
    screen.event(Event("thinking", "不进窗口"))
    screen.event(Event("tool_call", "写 hello.py", tool="Agent", payload={"input": {}}))
    screen.event(Event("text", "x" * 500))
    screen.close()
    lines = _tail_events(tmp_path / "runs")
    assert lines[:2] == ["[-] step: 工作", "[工作] tool_call: [Agent] 写 hello.py"]
    assert len(lines) == 3 and len(lines[2]) < 260, "each event is cut to 200 characters"
    assert list(screen.recent) == lines


def test_the_attempt_lines_count_cost_and_rounds():
    from flower.core.runtime import StepResult

    screen, out = _screen()
    screen.attempt("工作")
    screen.attempt("工作·判定#1")
    screen.attempt("工作#round2")
    ok = StepResult("工作#round2", ok=True, cost_usd=0.0123, num_turns=4, started_at=1, ended_at=3.5,
                    context=71_400, attempts=2, retired=["s1"])
    screen.attempt_done(ok, 0.5)
    screen.attempt_done(StepResult("设定目标", ok=False, error="boom"), 0.6)
    text = out.getvalue()
    assert "- 工作·判定#1:独立判定这一轮" in text and "- 工作#round2:没达成,接着同一个会话再干一轮" in text
    assert "+ 工作#round2 · $0.0123 · 4 轮 · 2.5s · 上下文 71.4K · 试了 2 次 · 换代 1 次 · 累计 $0.5000" in text
    assert "x 设定目标 没成:boom" in text


def test_the_english_screen_counts_one_turn_one_time_and_one_check_in_the_singular(monkeypatch, tmp_path):
    from flower.core.runtime import StepResult

    monkeypatch.setenv("FLOWER_LANG", "en")
    screen, out = _screen()
    for turns, tries, handoffs in ((1, 2, 1), (2, 3, 2)):
        screen.attempt_done(StepResult("工作", ok=True, num_turns=turns, attempts=tries, retired=["s"] * handoffs,
                                       started_at=1, ended_at=2), 0.5)
    screen.event(Event("text", "\n".join(str(i) for i in range(41))))
    lines = out.getvalue().splitlines()
    assert "+ 工作 (work) · $0.0000 · 1 turn · 1.0s · tried 2 times · 1 handoff · total $0.5000" in lines, lines
    assert "+ 工作 (work) · $0.0000 · 2 turns · 1.0s · tried 3 times · 2 handoffs · total $0.5000" in lines, lines
    assert "  …(1 more line, -v shows them all)" in lines, lines
    assert t("state.woke", n=1) == "ran here 1 time" and t("go.banner.checks", n=1) == "goal: 1 check"
    assert t("remote.result", mark="+", step="工作", cost=0.0, n=1, total=0.0) == "+ 工作 · $0.0000 · 1 turn · total $0.0000"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_spinner_does_not_count_while_a_question_waits_for_the_person(monkeypatch):
    """The spinner counts the model's seconds; while a question waits, the time is the person's and the prompt
    line says so — a clock still counting there read as the run working."""
    import time as clock

    now = [1000.0]
    monkeypatch.setattr(clock, "monotonic", lambda: now[0])
    out = _Tty()
    screen = cli.Screen(out=out)
    screen.attempt("确认需求")
    screen.event(_ask("asked"))
    now[0] += 30
    screen.refresh()
    waiting = out.getvalue()
    assert "确认需求 · 30 秒" not in waiting and "? 用什么语言?" in waiting
    screen.event(_ask("answered", answer="1"))
    now[0] += 30
    screen.refresh()
    assert "确认需求 · 30 秒" in out.getvalue()[len(waiting):], "the model's time is counted again"
    screen.close()


# -- where a typed line goes ----------------------------------------------------------------------
class _Rt:
    def __init__(self) -> None:
        self.said: list[str] = []

    def interrupt(self, words: str = "") -> None:
        self.said.append(words)


async def _until(cond, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


async def test_a_typed_line_answers_skips_amends_asks_the_oracle_or_interrupts(tmp_path):
    brief = tmp_path / "需求.md"
    brief.write_text("## 目标\n做一个 hello.py\n")
    ch = HumanChannel(timeout_s=10, amend_path=brief)
    screen, out = _screen(brief_path=brief)
    ch.on_event = screen.event
    r, w = os.pipe()
    rt, asked = _Rt(), []

    async def oracle(q: str) -> None:
        asked.append(q)

    con = cli.Console(screen, ch, rt, asyncio.get_running_loop(), tty=False, oracle=oracle, stream=os.fdopen(r, "rb"))
    con.start()
    try:
        q1 = asyncio.create_task(ch.ask("用什么语言?", ["Python", "Go"]))
        await _until(lambda: ch.pending())
        os.write(w, "2\n".encode())
        a = await asyncio.wait_for(q1, 5)
        assert a.state == "answered" and a.choice == 1 and ch.reply_text(a) == "Go"

        q2 = asyncio.create_task(ch.ask("要测试吗?"))
        await _until(lambda: ch.pending())
        os.write(w, b"\n")
        assert (await asyncio.wait_for(q2, 5)).state == "declined"

        os.write(w, "顺便加个 README\n? 到哪了\n".encode())
        await _until(lambda: ch.mail and asked)
        assert [m.text for m in ch.mail] == ["顺便加个 README"] and asked == ["到哪了"]
        assert "顺便加个 README" in brief.read_text()

        con.ctrl_c()
        assert con.interrupting
        os.write(w, "先停一下\n".encode())
        await _until(lambda: rt.said)
        assert rt.said == ["先停一下"] and not con.interrupting

        os.close(w)  # end of input: nobody can answer any more
        await _until(lambda: ch.closed)
        late = await asyncio.wait_for(ch.ask("还在吗?"), 5)
        assert late.state == "declined"
    finally:
        con.stop()
    text = out.getvalue()
    assert "  + Go" in text and "  . 已跳过" in text and "+ 收到 (它下次查收件箱时会看到;已追加进确认书)" in text
    assert "! 要打断这一轮" in text and "! 已打断这一轮,带着你的话接着干:先停一下" in text


async def test_keys_at_a_terminal_edit_the_line_and_ctrl_c_is_a_key(tmp_path):
    ch = HumanChannel(timeout_s=10)
    screen, out = _screen()
    screen.tty = True
    rt = _Rt()
    con = cli.Console(screen, ch, rt, asyncio.get_running_loop(), tty=True, stream=io.BytesIO())
    screen.prompt = con._prompt
    assert con._keys("加个 REDME\x7f\x7f\x7fADME\x1b[A\x1b[D") and con.typed == "加个 README"
    assert con._prompt() == t(cli.PROMPT_IDLE) + "加个 README"
    con._keys("\r")
    assert [m.text for m in ch.mail] == ["加个 README"] and con.typed == ""
    con._keys("丢掉这句\x15")
    assert con.typed == ""
    con._keys("x\x03")
    await asyncio.sleep(0.05)
    assert con.interrupting and con.typed == ""
    assert con._prompt() == t(cli.PROMPT_INTERRUPT)
    con._keys("换个做法\n")
    await asyncio.sleep(0.05)
    assert rt.said == ["换个做法"]
    assert con._keys("\x04") is False, "Ctrl-D on an empty line ends the input"
    assert (t(cli.PROMPT_IDLE) + "加个 README") in out.getvalue(), "the typed line stays on screen"


# -- odds and ends --------------------------------------------------------------------------------
def test_setup_writes_the_keys_the_credentials_lookup_reads(tmp_path, monkeypatch):
    from flower.core.credentials import load_dotenv

    assert cli.setup_values("sk-ant-abc") == {"ANTHROPIC_API_KEY": "sk-ant-abc"}
    values = cli.setup_values(" gw-token ", "https://gw.example", "claude-opus-5[1m]")
    assert values == {"ANTHROPIC_AUTH_TOKEN": "gw-token", "ANTHROPIC_BASE_URL": "https://gw.example",
                      "ANTHROPIC_MODEL": "claude-opus-5[1m]", "ANTHROPIC_DEFAULT_OPUS_MODEL": "claude-opus-5[1m]",
                      "ANTHROPIC_DEFAULT_SONNET_MODEL": "claude-opus-5[1m]"}
    monkeypatch.setenv("HOME", str(tmp_path))
    path = cli.write_env(values)
    assert path == tmp_path / ".config" / "flower" / ".env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text().startswith("# ")
    for key in values:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    taken = load_dotenv(home=tmp_path)
    assert os.environ["ANTHROPIC_AUTH_TOKEN"] == "gw-token" and "ANTHROPIC_MODEL" in taken
    for key in values:
        monkeypatch.delenv(key, raising=False)


def test_status_json_is_plain_json(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["status", "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert state["waking"] is False and state["steps"] == {} and state["last_results"] == []
    assert Path(state["workspace"]) == tmp_path and list(tmp_path.iterdir()) == []


def test_clean_and_gist():
    assert cli.clean("a\x1b[31mb\x1b]0;title\x07c\rd\x00") == "abc\nd"
    assert _gist("[Subagent hand-back] x\n## 结论\n写好了\n## 证据\n…") == "写好了"
    assert _gist("<tools>Write</tools>\n做完了") == "做完了"

"""The `flower` command as a user runs it: a real subprocess, the real bundled CLI, the scripted model.

Every run here is `python -m flower.cli …` (or the installed `flower` script) in a temp folder, with the
scripted model's environment exported into the child — no mocks of the SDK, the CLI or the terminal
(the terminal tests drive a real pseudo-terminal).
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from flower.core.credentials import LOOKUP_VARS
from flower.testing import Rule, ScriptedModel, say, tool

pytestmark = pytest.mark.cli

ASK = "mcp__human__ask"
CLARIFIER, JUDGE, LEAD, ORACLE = "你是需求确认者", "你是判定者", "你是协调者", "你是旁路顾问"
BRIEF = "## 目标\n做一个 hello.py\n## 验收标准\n运行打印 hello\n## 边界\n只用标准库\n## 未知与假设\n用 Python 3"
GOAL = "## 目标\nhello.py 打印问候\n## 检查清单\n1. python hello.py 输出 hello\n2. 支持 --name"
ACHIEVED = "## 结论\n达成\n## 理由\n两条检查都过了\n## 未通过\n无"
REPORT = "## 结论\n写好了 hello.py\n## 证据\n跑过了\n## 交付物\nhello.py\n## 未验证\n无"
FLOWER_SCRIPT = Path(sys.executable).with_name("flower")


def _rules(ws: Path, *, clarify_answer: str = "没有人回答", goal_delay: float = 0.0) -> list[Rule]:
    """clarify (one question) → goal → the coordinator dispatches a worker who writes hello.py → judged."""
    out = ws / "hello.py"
    return [
        Rule(tool(ASK, {"question": "用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER, prompt="hello 程序"),
        Rule(say(BRIEF), system=CLARIFIER, result=clarify_answer),
        Rule(say(GOAL, delay=goal_delay), system=JUDGE, prompt="请为它设定目标"),
        Rule(tool("Agent", {"description": "实现 hello.py", "prompt": "WORKER-TASK 写 hello.py",
                            "subagent_type": "coder", "run_in_background": False}),
             system=LEAD, agent=False, prompt="把上面的需求做成"),
        Rule(tool("Write", {"file_path": str(out), "content": "print('hello')\n"}), agent=True, prompt="WORKER-TASK"),
        Rule(say(REPORT), agent=True, prompt="WORKER-TASK", result="hello.py"),
        Rule(say("做完了:hello.py 写好了"), system=LEAD, agent=False, result="写好了 hello.py"),
        Rule(say("[接着做] 看过了:hello.py 还在,完成"), system=LEAD, agent=False, user="[接着做]"),
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了", repeat=True),
        Rule(say("正在设定目标,需求已经确认了。"), system=ORACLE, repeat=True),
    ]


def _env(model: ScriptedModel | None, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LOOKUP_VARS}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1", COLUMNS="100", FLOWER_LANG="zh")  # these screens are the Chinese ones
    env.pop("XDG_CONFIG_HOME", None)
    if model is not None:
        env.update(model.env)
    env.update(extra)
    return env


def flower(*args: str, cwd: Path, env: dict[str, str], script: bool = False, timeout: float = 120,
           stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    cmd = [str(FLOWER_SCRIPT)] if script else [sys.executable, "-m", "flower.cli"]
    return subprocess.run([*cmd, *args], cwd=cwd, env=env, stdin=stdin, capture_output=True, text=True,
                          timeout=timeout)


def _folders(root: Path) -> tuple[Path, Path]:
    """A home folder and a project folder under ``root``, both empty."""
    home, ws = root / "home", root / "proj"
    home.mkdir()
    ws.mkdir()
    return home, ws


def _one_line_error(p: subprocess.CompletedProcess[str], code: int) -> str:
    assert p.returncode == code, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flower: "), p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    return lines[0]


def _digest(*files: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


# -- one unattended run, looked at three ways -----------------------------------------------------------
@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`flower "帮我做一个 hello 程序" --timeout 0` run to the end in a fresh folder; the model keeps serving."""
    root = tmp_path_factory.mktemp("cli")
    home, ws = _folders(root)
    model = ScriptedModel(_rules(ws)).start()
    env = _env(model, home)
    started = time.monotonic()
    p = flower("帮我做一个 hello 程序", "--timeout", "0", cwd=ws, env=env)
    took = time.monotonic() - started
    yield {"ws": ws, "home": home, "env": env, "model": model, "p": p, "took": took}
    model.stop()


def test_an_unattended_run_goes_clarify_goal_work_judge_and_says_so(done):
    p, ws, model = done["p"], done["ws"], done["model"]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Traceback" not in p.stdout + p.stderr
    out = p.stdout
    order = ["== 确认需求 (1/3)", "? 用什么语言?", "1) Python", "没人值守", "+ 确认需求 ·",
             "== 设定目标 (2/3)", "+ 设定目标 ·", "== 工作 (3/3)", "> 派给 coder:实现 hello.py",
             "| * Write", "<- 报告交回来了:写好了 hello.py", "做完了:hello.py 写好了", "+ 工作 ·",
             "- 工作·判定#1:独立判定这一轮", "达成", "+ 工作·判定#1 ·", "总花费 $", "+ 完成 · 需求"]
    at = [out.find(s) for s in order]
    assert all(i >= 0 for i in at), [s for s, i in zip(order, at) if i < 0]
    assert at == sorted(at), "the screen follows the run in order"
    assert f"清单 {ws / 'runs' / 'manifest.json'}" in out
    assert (ws / "hello.py").read_text() == "print('hello')\n"
    assert (ws / ".flower" / "notes" / "需求.md").is_file() and (ws / ".flower" / "notes" / "目标.md").is_file()
    rows = json.loads((ws / "runs" / "manifest.json").read_text())
    assert [r["step"] for r in rows] == ["确认需求", "设定目标", "工作", "工作·判定#1"] and all(r["ok"] for r in rows)
    # clarify went on by itself: the question fell through at once and the model read why
    clar = [r for r in model.conversation if CLARIFIER in r.system]
    assert "没有人回答" in clar[-1].result_text
    assert model.unmatched == []
    assert done["took"] < 60


def test_status_after_a_run_shows_the_wake_state_and_writes_nothing(done, tree_hash):
    ws, env = done["ws"], done["env"]
    before = tree_hash(ws, done["home"])
    p = flower("status", cwd=ws, env=env, script=True)
    j = flower("status", "--json", cwd=ws, env=env)
    elsewhere = flower("-w", str(ws), "status", cwd=done["home"], env=env)
    assert tree_hash(ws, done["home"]) == before, "status changed something on disk"
    assert p.returncode == 0 and j.returncode == 0 and elsewhere.returncode == 0, p.stderr + j.stderr
    # the judge said achieved: done is done, not "continue"
    assert "已经做完了(判定:达成)" in p.stdout and "已完成:判定为达成" in p.stdout and "接着上次" not in p.stdout
    assert "需求已确认" in p.stdout and "目标 2 条检查" in p.stdout
    assert "+ 工作·判定#1" in p.stdout and "会话:" in p.stdout
    assert elsewhere.stdout.splitlines()[1:] == p.stdout.splitlines()[1:]
    state = json.loads(j.stdout)
    assert state["waking"] is True and state["checks"] == 2 and state["woke"] == 1 and state["done"]["verdict"]
    assert set(state["steps"]) == {"确认需求", "设定目标", "工作"}
    assert [r["step"] for r in state["last_results"]] == ["确认需求", "设定目标", "工作", "工作·判定#1"]
    # a folder that never ran: still nothing written, not even a runs/ folder
    fresh = done["home"] / "fresh"
    fresh.mkdir()
    p2 = flower("status", cwd=fresh, env=env)
    assert p2.returncode == 0 and "从头开始" in p2.stdout and list(fresh.iterdir()) == []


def test_ask_answers_from_a_fresh_session_that_never_touches_the_run(done):
    ws, env, model = done["ws"], done["env"], done["model"]
    runs = ws / "runs"
    kept = _digest(runs / "sessions.db", runs / "lineage.json", runs / "manifest.json")
    sessions_before = set(model.sessions())
    p = flower("ask", "到哪一步了?", cwd=ws, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "# 旁路" in p.stdout and "正在设定目标,需求已经确认了。" in p.stdout and "没有进入那次运行的上下文" in p.stdout
    assert _digest(runs / "sessions.db", runs / "lineage.json", runs / "manifest.json") == kept
    asked = [r for r in model.conversation if ORACLE in r.system]
    assert len(asked) == 1, [r.session for r in asked]
    assert not [m for m in asked[0].messages if m["role"] == "assistant"], "a fresh session: no turn of the run's in it"
    assert asked[0].session not in sessions_before
    lineage = json.loads((runs / "lineage.json").read_text())["steps"]
    assert asked[0].session not in lineage.values()
    prompt = asked[0].prompt
    assert "到哪一步了?" in prompt and "需求已确认" in prompt and "工作·判定#1" in prompt, prompt
    assert "[工作] tool_call: [Agent] 实现 hello.py" in prompt, "the run's recent events are in the window"
    assert "[工作·判定#1] text: ## 结论 达成" in prompt
    assert (runs / "aside" / "manifest.json").is_file()
    # `flower "?…"` is the same question
    q = flower("? 还要多久", cwd=ws, env=env)
    assert q.returncode == 0 and "# 旁路" in q.stdout


def test_with_no_terminal_and_the_default_timeout_nothing_waits(tmp_path):
    """stdin is /dev/null: the warning says so, the question falls through at once instead of waiting 30 min."""
    home, ws = _folders(tmp_path)
    with ScriptedModel(_rules(ws, clarify_answer="跳过了这个问题")) as model:
        started = time.monotonic()
        p = flower("帮我做一个 hello 程序", cwd=ws, env=_env(model, home))
        took = time.monotonic() - started
        assert model.unmatched == []
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "! 标准输入不是终端" in p.stdout and "  . 已跳过(提问渠道已关闭)" in p.stdout and "+ 完成" in p.stdout
    assert took < 60


# -- mistakes a user can make: one line, no traceback ---------------------------------------------------
def test_no_credentials_is_one_line_naming_what_to_set(tmp_path):
    home, ws = _folders(tmp_path)
    env = _env(None, home, CLAUDE_CONFIG_DIR=str(tmp_path / "claude"))
    p = flower("帮我做一个 hello 程序", "--timeout", "0", cwd=ws, env=env, script=True)
    line = _one_line_error(p, 1)
    assert "ANTHROPIC_API_KEY" in line and "~/.config/flower/.env" in line and "flower setup" in line
    assert p.stdout == ""
    assert list(ws.iterdir()) == [], "nothing is written before the credentials are there"
    ask = flower("ask", "到哪了", cwd=ws, env=env)
    assert "这里还没跑过" in _one_line_error(ask, 1)


def test_isolate_outside_git_is_one_line_and_exit_1(tmp_path):
    home, ws = _folders(tmp_path)
    with ScriptedModel([]) as model:
        p = flower("--isolate", "帮我做一个 hello 程序", "--timeout", "0", cwd=ws, env=_env(model, home))
        line = _one_line_error(p, 1)
        assert model.conversation == []
    assert "--isolate" in line and "git" in line and str(ws) in line
    assert list(ws.iterdir()) == []


def test_an_empty_ask_in_a_fresh_folder_is_one_line(tmp_path):
    home, ws = _folders(tmp_path)
    with ScriptedModel([]) as model:
        p = flower("--timeout", "0", cwd=ws, env=_env(model, home))  # nothing on the line, nothing on stdin
        q = flower("   ", cwd=ws, env=_env(model, home))
        assert model.conversation == []
    assert _one_line_error(p, 1) == "flower: 要给一句诉求,例如 flower '帮我做一个 X'"
    assert _one_line_error(q, 1) == "flower: 要给一句诉求,例如 flower '帮我做一个 X'"


def test_a_bad_flag_or_an_unusable_workspace_is_one_line(tmp_path):
    """The rest of the table is in tests/unit/test_cli.py; here: the real process, its exit codes."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    env = _env(None, tmp_path)
    bad = flower("--rounds", "many", "做 X", cwd=tmp_path, env=env, script=True)
    assert "--rounds 要一个整数" in _one_line_error(bad, 2)
    ws = flower("-w", str(a_file), "做 X", "--timeout", "0", cwd=tmp_path, env=env)
    assert "不是文件夹" in _one_line_error(ws, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# -- at a terminal: the prompts, an answer typed at the prompt, the oracle, continuing ---------------------
class Terminal:
    """A real pseudo-terminal around `python -m flower.cli`: what a person at a terminal sees and types."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "flower.cli", *args], cwd=cwd, env=env, stdin=slave,
                                     stdout=slave, stderr=slave, start_new_session=True, close_fds=True)
        os.close(slave)
        self.master, self.buf = master, b""

    @property
    def text(self) -> str:
        return self.buf.decode("utf-8", "replace")

    def _pump(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:
            data = b""
        self.buf += data
        return bool(data)

    def expect(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.buf:
            alive = self._pump(0.1)
            assert alive or self.proc.poll() is None, f"exited {self.proc.returncode} before {text!r}:\n{self.text[-3000:]}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout}s:\n{self.text[-3000:]}"

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def finish(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self._pump(0.1) or self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"still running after {timeout}s:\n{self.text[-3000:]}")
        os.close(self.master)
        return self.proc.wait(10)


def test_at_a_terminal_it_asks_takes_answers_and_continues_next_time(tmp_path):
    home, ws = _folders(tmp_path)
    with ScriptedModel(_rules(ws, clarify_answer="Python", goal_delay=2.0)) as model:
        env = _env(model, home)
        first = Terminal(["--timeout", "60"], cwd=ws, env=env)
        first.expect("要做什么? 一句话就够")
        first.type("帮我做一个 hello 程序,支持中文引号“这样”!")
        first.expect("? 用什么语言?")
        first.expect("你的回答 (回车=跳过")
        first.type("1")
        first.expect("+ Python")  # the answer by its number: the option it picks, in words
        first.expect("== 设定目标")
        first.type("? 现在到哪一步了")  # the oracle, while the goal is being set
        first.expect("# 旁路")
        first.expect("没有打扰正在跑的运行")
        assert first.finish() == 0, first.text[-3000:]
        assert "+ 完成" in first.text and (ws / "hello.py").is_file()
        clar = [r for r in model.conversation if CLARIFIER in r.system]
        assert "中文引号“这样”!" in clar[0].prompt and clar[-1].result_text.strip() == "Python"
        oracle = [r for r in model.conversation if ORACLE in r.system]
        assert len(oracle) == 1 and "现在到哪一步了" in oracle[0].prompt and "用什么语言" in oracle[0].prompt
        work = json.loads((ws / "runs" / "lineage.json").read_text())["steps"]["工作"]

        second = Terminal([], cwd=ws, env=env)
        second.expect("这件事已经做完了:判定为达成。回车或 /new = 开始新的;/continue = 仍然接着做")
        second.type("/continue")  # done is done: continuing takes a word, not a bare Enter
        second.expect(f"<- 在 {ws} 接上上次  需求已确认 · 目标 2 条")
        second.expect("第 1 次唤醒")
        second.expect("<- 接着上次的会话")
        assert second.finish() == 0, second.text[-3000:]
        assert "? 用什么语言" not in second.text, "nothing is asked again"
        resumed = [r for r in model.conversation if "[接着做]" in r.user and LEAD in r.system]
        assert resumed and resumed[0].session == work
        assert model.unmatched == []


def test_ctrl_c_at_the_terminal_interrupts_the_round_and_passes_the_words_on(tmp_path):
    """Ctrl-C is a key here, not a signal: the CLI process survives and the same session continues."""
    home, ws = _folders(tmp_path)
    rules = [Rule(say(BRIEF), system=CLARIFIER), Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
             Rule(say("听到了:改用 argparse"), system=LEAD, agent=False, user="改用 argparse"),
             Rule(say("第一段回复", delay=2), system=LEAD, agent=False, prompt="把上面的需求做成"),
             Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了")]
    with ScriptedModel(rules) as model:
        term = Terminal(["做一个 hello 程序", "--timeout", "0"], cwd=ws, env=_env(model, home))
        term.expect("== 工作 (3/3)")
        deadline = time.monotonic() + 30
        while not any(LEAD in r.system for r in model.conversation):  # the coordinator's turn is under way
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.write(term.master, b"\x03")
        term.expect("! 要打断这一轮")
        term.expect("要说什么")
        term.type("改用 argparse")
        term.expect("! 已打断这一轮,带着你的话接着干:改用 argparse")
        assert term.finish() == 0, term.text[-3000:]
        lead = [r for r in model.conversation if LEAD in r.system and not r.is_subagent]
        assert len(lead) == 2 and lead[0].session == lead[1].session, "the same session goes on"
        assert lead[1].user.startswith("改用 argparse") and "打断的正常副作用" in lead[1].user
        assert model.unmatched == []
    rows = json.loads((ws / "runs" / "manifest.json").read_text())
    work = next(r for r in rows if r["step"] == "工作")
    assert work["ok"] and work["attempts"] == 1 and work["errors"] == [], "an interrupt is not a failed attempt"


# -- SIGTERM: the step in flight goes into the manifest ----------------------------------------------------
def test_sigterm_puts_the_step_in_flight_into_the_manifest(tmp_path):
    home, ws = _folders(tmp_path)
    rules = [Rule(say(BRIEF, delay=20), system=CLARIFIER)]
    with ScriptedModel(rules) as model:
        proc = subprocess.Popen([sys.executable, "-m", "flower.cli", "帮我做一个 hello 程序", "--timeout", "0"],
                                cwd=ws, env=_env(model, home), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not any(CLARIFIER in r.system for r in model.conversation):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, out[-2000:], err[-2000:])
    assert "! 收到 SIGTERM" in err and "Traceback" not in err
    rows = json.loads((ws / "runs" / "manifest.json").read_text())
    assert [(r["step"], r["error"]) for r in rows] == [("确认需求", "killed-by-signal")]


# -- the other two ways in: a workflow of your own, a single agent ------------------------------------------
FLOWS = '''
from flower.core.agent import AgentSpec
from flower.workflow import Step, Workflow

def main():
    return Workflow([Step("看一眼", AgentSpec("看一眼", "", allowed_tools=["Read"]), "MY-FLOW 看一眼仓库")])
'''


def test_run_and_once(tmp_path):
    home, ws = _folders(tmp_path)
    (ws / "flows.py").write_text(FLOWS)
    rules = [Rule(say("仓库里只有 flows.py"), prompt="MY-FLOW"), Rule(say("ONCE-OK"), prompt="只说一句")]
    with ScriptedModel(rules) as model:
        env = _env(model, home)
        run = flower("run", "flows.py:main", cwd=ws, env=env)
        once = flower("once", "只说一句", "-t", "Read", cwd=ws, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "== 看一眼 (1/1)" in run.stdout and "仓库里只有 flows.py" in run.stdout and "总花费 $" in run.stdout
    assert once.returncode == 0 and "ONCE-OK" in once.stdout, once.stdout + once.stderr
    steps = [r["step"] for r in json.loads((ws / "runs" / "manifest.json").read_text())]
    assert steps == ["看一眼", "ad-hoc"]



# -- terminal injection: what the model chooses reaches the terminal as plain text ------------------------------------
HOSTILE_TOOL = "Bash\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x9b2J\u202e"
HOSTILE_TEXT = "look\x1b]52;c;cm0gLXJmIH4=\x07 here\x9d0;title\x07 \x1b[2J\u202etxt.exe\rover\x08\x08\x07"


def terminal_controls(raw: bytes) -> list[str]:
    """What a terminal would obey or hide in these bytes: ESC, C1 controls, bidi overrides and isolates."""
    return [c for c in raw.decode("utf-8") if c == "\x1b" or "\x80" <= c <= "\x9f" or "\u202a" <= c <= "\u202e"
            or "\u2066" <= c <= "\u2069"]


def test_a_model_chosen_tool_name_and_text_reach_the_screen_without_their_escapes(tmp_path):
    home, ws = _folders(tmp_path)
    rules = [Rule(tool(HOSTILE_TOOL, {"command": "echo \x1b]0;t\x07"}), say(HOSTILE_TEXT), prompt="HOSTILE-ONCE")]
    with ScriptedModel(rules) as model:
        p = subprocess.run([sys.executable, "-m", "flower.cli", "once", "HOSTILE-ONCE 说一句", "-v"], cwd=ws,
                           env=_env(model, home), stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert model.unmatched == []
    assert terminal_controls(p.stdout) == [] and terminal_controls(p.stderr) == [], p.stdout
    out = p.stdout.decode()
    assert "* Bash echo" in out and "look here txt.exe" in out, out  # shown, only the controls gone

"""The first ten minutes, as a new user has them: the README's first command (``flower demo``) at a real
pseudo-terminal, the README's example run exactly as written, done being done, ``once`` failing when it was
only denied, flower's folders kept out of ``git status``, and the same session in English and in Chinese.

No mocks: real subprocesses, the real bundled CLI, the scripted model, the real service for the demo.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flower.cli.messages import MESSAGES
from flower.core.credentials import LOOKUP_VARS
from flower.testing import ScriptedModel, starter_script

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef「」]")
CONTRACT = ("确认需求", "设定目标", "工作·判定", "工作", "需求.md", "目标.md", "问答记录.md")


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LOOKUP_VARS and k not in ("LANG", "LC_ALL", "FLOWER_LANG")}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1", COLUMNS="110", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    env.pop("XDG_CONFIG_HOME", None)
    env.update(extra)
    return env


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


class Terminal:
    """A shell command on a real pseudo-terminal: what a person sees, and what they type."""

    def __init__(self, command: str, *, cwd: Path, env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdin=slave, stdout=slave,
                                     stderr=slave, start_new_session=True, close_fds=True)
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

    def expect(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.buf:
            alive = self._pump(0.1)
            assert alive or self.proc.poll() is None, f"exited {self.proc.returncode} before {text!r}:\n{self.text[-4000:]}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout}s:\n{self.text[-4000:]}"

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\r").encode())

    def finish(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while self._pump(0.1) or self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"still running after {timeout}s:\n{self.text[-4000:]}")
        os.close(self.master)
        return self.proc.wait(10)


def _plain(text: str) -> str:
    """The screen without the escape sequences the prompt and the spinner are drawn with."""
    return re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]", "", text).replace("\r", "")


# -- acceptance 1: the README's first command ------------------------------------------------------------------
def test_the_readmes_first_command_shows_the_main_job_in_order(tmp_path):
    """The README's first command in a copy of the repository. Its install steps are not re-run here (the test
    runs inside the venv they made — a copy with ``.venv`` pointing at it); what it ends with, ``flower demo``,
    runs exactly as written, at a terminal, and the person answers the question at the prompt."""
    first = _blocks("bash")[0].strip()
    install, _, demo = first.rpartition(" && ")
    assert demo == ".venv/bin/flower demo" and install.startswith("python3 -m venv .venv && .venv/bin/pip install")
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    (clone / ".venv").symlink_to(Path(sys.prefix))
    home = tmp_path / "home"
    home.mkdir()
    started = time.monotonic()
    term = Terminal(demo, cwd=clone, env=_env(home))
    term.expect("? Which language should the greeting script be in?", timeout=300)  # a shared machine can be slow
    term.expect("your answer")
    term.type("1")
    code = term.finish(timeout=300)
    took = time.monotonic() - started
    screen = _plain(term.text)
    assert code == 0, screen[-4000:]
    stages = ["http://127.0.0.1:", "POST /v1/runs", "== 确认需求", "? Which language", "1) Python", "+ Python",
              "## 目标", "== 设定目标", "## 检查清单", "== 工作", "guard stopped coordinator's Write",
              "> dispatched to coder", "| * Write hello.py", "| * Write test_hello.py", "<- the report came back",
              "工作·判定#1", "达成", ": succeeded", "the work is on branch flower/", "- diffstat:", "hello.py  +9 -0",
              "- the diff:", "+++ b/hello.py", "+    return f\"hello, {name}\"", "+ demo done in"]
    at = [screen.find(s) for s in stages]
    assert all(i >= 0 for i in at), [s for s, i in zip(stages, at) if i < 0]
    assert at == sorted(at), [s for s, i in sorted(zip(stages, at), key=lambda x: x[1])]
    assert not list(Path("/tmp").glob(f"flower-demo-*/repos/tiny-shop/{home.name}")), "nothing left behind"
    print(f"\nflower demo at a terminal, README's command in a copy: {took:.1f} s")


def test_demo_here_runs_the_same_flow_in_process(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    p = subprocess.run([str(BIN / "flower"), "demo", "--here", "--yes"], cwd=tmp_path, env=_env(home),
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for s in ("in-process (--here)", "(--yes: answering \"Python\"", "+ Python", "== 设定目标", "> dispatched to coder",
              "| * Write hello.py", "达成", "- the diff:", "+++ b/test_hello.py", "+ demo done in"):
        assert s in p.stdout, (s, p.stdout[-3000:])
    assert "http://" not in p.stdout, "no service in-process"


@contextlib.contextmanager
def _kept_demo(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    """``flower demo --keep --yes`` up to its kept service: (home, url, token); stopped after."""
    home = tmp_path / "home"
    home.mkdir()
    demo = subprocess.Popen([str(BIN / "flower"), "demo", "--keep", "--yes"], cwd=tmp_path, env=_env(home),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        seen = ""
        while "- the service stays up on" not in seen:
            line = demo.stdout.readline()  # type: ignore[union-attr]
            assert line, f"the demo ended before keeping its service:\n{seen[-3000:]}"
            seen += line
        url, token = re.search(r"stays up on (\S+) \(token (\w+)\)", seen).groups()  # type: ignore[union-attr]
        yield home, url, token
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(30)


def test_a_kept_demo_answers_any_later_ask_by_option_number(tmp_path):
    """``flower demo --keep`` is for exploring: after its own run, a different ask submitted with the printed URL and
    token through the real ``flower remote`` at a terminal is clarified, worked and judged 达成 — its question
    answered by the option's number (a number past the options is said, and the question asked again)."""
    import pexpect

    with _kept_demo(tmp_path) as (home, url, token):
        child = pexpect.spawn(str(BIN / "flower"), ["remote", "submit", "write a haiku about pears", "--server", url,
                                                    "--token", token], env=_env(home), encoding="utf-8",
                              timeout=120, dimensions=(50, 160))
        child.expect("2\\) Keep it small")
        child.expect("your answer")
        child.send("7\r")
        child.expect("there is no option 7")
        child.send("2\r")
        child.expect("\\+ Keep it small")
        child.expect("达成")
        child.expect(r"\+ run \S+ succeeded")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before


def test_a_kept_demos_second_ask_commits_the_persons_words_and_nothing_of_the_clis_context(tmp_path):
    """The command the kept demo prints, with the ask the issue tried: the brief, the goal and the committed file
    hold "add a CHANGELOG entry" — not the context the bundled CLI puts before it (``<system-reminder>`` blocks,
    "As you answer the user's questions …", git status)."""
    import pexpect

    ask = "add a CHANGELOG entry"
    with _kept_demo(tmp_path) as (home, url, token):
        remote = ["remote", "--server", url, "--token", token]
        child = pexpect.spawn(str(BIN / "flower"), [*remote, "submit", ask], env=_env(home), encoding="utf-8",
                              timeout=120, dimensions=(50, 160))
        child.expect("your answer")
        child.send("1\r")
        child.expect(r"\+ run (\S+) succeeded")
        run_id = child.match.group(1)
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before
        diff = subprocess.run([str(BIN / "flower"), *remote, "diff", run_id], env=_env(home), capture_output=True,
                              text=True, timeout=60)
        assert diff.returncode == 0, diff.stderr
        shown = subprocess.run([str(BIN / "flower"), *remote, "show", run_id, "--json"], env=_env(home),
                               capture_output=True, text=True, timeout=60)
    added = [line[1:] for line in diff.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added and added[0] == f"# {ask}", diff.stdout
    leaks = ("system-reminder", "As you answer", "gitStatus", "Co-Authored-By", "claudeMd", "currentDate")
    for text in (diff.stdout, shown.stdout):
        assert not [leak for leak in leaks if leak in text], text[-4000:]
    assert ask in shown.stdout, shown.stdout[-4000:]


# -- acceptance 2: the README's example, exactly as shown -----------------------------------------------------
@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The README's example line, run as written from the repository root, in a fresh home."""
    line = next(x for b in _blocks("bash") for x in b.splitlines() if "examples/hello_script.py --" in x).strip()
    assert line == 'python -m flower.testing examples/hello_script.py -- flower -w ~/flower-try "make a hello.py"'
    home = tmp_path_factory.mktemp("example")
    env = _env(home)
    p = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    return {"p": p, "home": home, "env": env, "ws": home / "flower-try"}


def test_the_readme_example_runs_a_whole_starter_flow(example):
    p, ws = example["p"], example["ws"]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    order = ["== 确认需求 (clarify) · step 1 of 3", "? Which language?", "== 设定目标 (set the goal) · step 2 of 3",
             "== 工作 (work) · step 3 of 3", "> dispatched to coder",
             "| * Write hello.py", "<- the report came back: Wrote hello.py", "工作·判定#1", "达成", "+ done"]
    at = [out.find(s) for s in order]
    assert all(i >= 0 for i in at) and at == sorted(at), (order, at, out[-3000:])
    assert (ws / "hello.py").read_text() == "print('hello')\n"
    assert "$0.0000" in out and not re.search(r"\$0\.0*[1-9]", out), "the scripted model invents no costs"
    assert "requests no rule answered" not in p.stderr


def test_done_is_done_status_says_so_and_a_bare_flower_does_not_spend(example):
    ws, env = example["ws"], example["env"]
    status = subprocess.run([str(BIN / "flower"), "status"], cwd=ws, env=env, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0 and "it is done (the judge said achieved)" in status.stdout, status.stdout
    rows = json.loads((ws / "runs" / "manifest.json").read_text())
    bare = subprocess.run(["bash", "-c", "python -m flower.testing examples/hello_script.py -- flower -w ~/flower-try"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert bare.returncode == 1 and "this job is done (the judge said achieved)" in bare.stderr, bare.stderr
    assert json.loads((ws / "runs" / "manifest.json").read_text()) == rows, "not a cent spent on finished work"


# -- acceptance 4: once, .git/info/exclude ------------------------------------------------------------------
def test_once_exits_nonzero_when_its_tool_calls_were_denied_and_nothing_came_of_it(tmp_path):
    from flower.testing import Rule, say, tool

    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()

    def once(*flags: str) -> subprocess.CompletedProcess[str]:
        rules = [Rule(tool("Write", {"file_path": str(ws / "a.txt"), "content": "hi\n"}), prompt="write a.txt"),
                 Rule(say("That is all I can do."), result="", repeat=True)]
        with ScriptedModel(rules) as model:
            return subprocess.run([str(BIN / "flower"), "once", "write a.txt", *flags], cwd=ws,
                                  env=_env(home, **model.env), capture_output=True, text=True, timeout=120,
                                  stdin=subprocess.DEVNULL)

    denied = once()
    assert not (ws / "a.txt").exists()
    allowed = once("-t", "Write", "-p", "acceptEdits")
    assert denied.returncode == 1, denied.stdout[-2000:] + denied.stderr[-2000:]
    assert "every tool call was denied (Write)" in denied.stderr and "-t" in denied.stderr
    assert allowed.returncode == 0 and (ws / "a.txt").read_text() == "hi\n", allowed.stdout + allowed.stderr


def test_in_a_git_repo_runs_and_the_workbench_stay_out_of_git_status(tmp_path, git_repo):
    home = tmp_path / "home"
    home.mkdir()
    repo = git_repo(tmp_path / "repo")
    with ScriptedModel(starter_script("make a hello.py")) as model:
        p = subprocess.run([str(BIN / "flower"), "make a hello.py", "--timeout", "0"], cwd=repo,
                           env=_env(home, **model.env), capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert status.splitlines() == ["?? hello.py"], status
    exclude = (repo / ".git" / "info" / "exclude").read_text()
    assert "/runs/" in exclude.splitlines() and "/.flower/" in exclude.splitlines()
    assert not (repo / ".gitignore").exists()


# -- acceptance 3: one session, two languages ----------------------------------------------------------------
def _chunks(template: str, *, chinese: bool) -> list[str]:
    """The literal parts of a catalogue text long enough to recognise on a screen."""
    parts = [p.strip(" \n·:()-+!#>.,;") for p in re.split(r"\{[^}]*\}", template)]
    if chinese:
        return [p for p in parts if CJK.search(p) and len(p) >= 4 and p not in CONTRACT]
    return [p for p in parts if len(re.sub(r"[^A-Za-z]", "", p)) >= 10]


UI = re.compile(r"^(\+ |- |== |> |<- |! |x |\. |\? |total |flower)")


@pytest.fixture(scope="module")
def two_languages(tmp_path_factory):
    out = {}
    for lang in ("C.UTF-8", "zh_CN.UTF-8"):
        root = tmp_path_factory.mktemp(lang.split(".")[0])
        home, ws = root / "home", root / "ws"
        home.mkdir()
        ws.mkdir()
        with ScriptedModel(starter_script("make a hello.py")) as model:
            env = _env(home, LANG=lang, **model.env)
            go = subprocess.run([str(BIN / "flower"), "make a hello.py"], cwd=ws, env=env, capture_output=True,
                                text=True, timeout=300, stdin=subprocess.DEVNULL)
            status = subprocess.run([str(BIN / "flower"), "status"], cwd=ws, env=env, capture_output=True, text=True,
                                    timeout=60)
            bad = subprocess.run([str(BIN / "flower"), "--rounds", "x"], cwd=ws, env=env, capture_output=True,
                                 text=True, timeout=60)
            help_ = subprocess.run([str(BIN / "flower"), "--help"], cwd=ws, env=env, capture_output=True, text=True,
                                   timeout=60)
        assert go.returncode == 0, go.stdout[-3000:] + go.stderr[-3000:]
        out[lang] = "\n".join(p.stdout + p.stderr for p in (go, status, bad, help_))
    return out


def test_english_and_chinese_screens_with_no_catalogue_text_of_the_other_language(two_languages):
    en, zh = two_languages["C.UTF-8"], two_languages["zh_CN.UTF-8"]
    table = []
    for key, (en_text, zh_text) in sorted(MESSAGES.items()):
        table += [(key, c, "zh screen") for c in _chunks(en_text, chinese=False) if c in zh and c not in zh_text]
        table += [(key, c, "en screen") for c in _chunks(zh_text, chinese=True) if c in en and c not in en_text]
    assert table == [], table
    assert "the ask is empty" not in en and "+ done" in en and "+ 完成" in zh
    assert "usage: flower" in en and "用法:flower" in zh and "options:" in en and "选项:" in zh


def test_no_line_of_flowers_own_mixes_the_languages(two_languages):
    """flower's own lines (not the model's text, which the screen indents) are all English, or all Chinese,
    but for the names the reference fixes (step names, file names)."""
    for lang, text in two_languages.items():
        for line in _plain(text).splitlines():
            if not UI.match(line) or line.startswith("x "):  # x: a tool's error text, the model's side
                continue
            bare = line
            for word in CONTRACT:
                bare = bare.replace(word, "")
            if lang == "C.UTF-8":
                assert not CJK.search(bare), f"{lang}: {line}"
            elif re.search(r"[A-Za-z]{3,}.*\s[a-z]{3,}\s[a-z]{3,}", re.sub(r"\S*[/\\~]\S*|flower \w+|--[\w-]+", "", bare)):
                assert CJK.search(bare), f"{lang}: an English line on the Chinese screen: {line}"


# -- signs of life, and a tidy scripted model ----------------------------------------------------------------
def test_a_slow_model_call_shows_a_spinner_with_the_elapsed_time_at_a_terminal_only(tmp_path, example):
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    rules = starter_script("make a hello.py")
    goal = next(r for r in rules if r.name == "judge sets the goal")
    goal.answers[0].delay = 4.0  # type: ignore[union-attr]
    with ScriptedModel(rules) as model:
        term = Terminal(f"{BIN / 'flower'} 'make a hello.py' --timeout 0", cwd=ws, env=_env(home, **model.env))
        term.expect("== 设定目标")
        term.expect("设定目标 (set the goal) · 3s")  # the spinner's line: the attempt (glossed) and its seconds
        assert term.finish(timeout=300) == 0, _plain(term.text)[-3000:]
    assert any(frame in term.text for frame in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
    piped = example["p"].stdout
    assert "\x1b[" not in piped and not any(frame in piped for frame in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"), "plain lines off a terminal"


def test_the_scripted_models_temp_folder_goes_on_sigterm(tmp_path):
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "flower.testing", str(ROOT / "examples" / "hello_script.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        config = ""
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("export CLAUDE_CONFIG_DIR="):
                config = line.split("=", 1)[1].strip()
            if line.startswith("# serving"):
                break
        assert config and Path(config).is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not Path(config).exists(), "the config folder is removed on SIGTERM too"

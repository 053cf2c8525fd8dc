"""``flower remote`` against a live service, through a pseudo-terminal as a person uses it: a scripted run is
submitted, its question shown and answered at the prompt, the verdict seen, the diff printed; Ctrl-C
interrupts a run over the API. The client knows only the service's URL and a tenant token."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from _service_helpers import TOKENS, Deployment, Service, git, run_status, serve, wait_question, wait_status
from _hello import ASK_TEXT, hello_rules, interrupt_rules
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ASK, BRIEF, CLARIFIER

pytestmark = pytest.mark.cli

FLOWER = [sys.executable, "-c", "import sys; from flower.cli import main; sys.exit(main())"]


def client_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
    return {**env, "HOME": str(home), "PYTHONUNBUFFERED": "1", "TERM": "xterm", "COLUMNS": "160",
            "FLOWER_LANG": "zh"}  # the Chinese screen (issue 12 made English the default)


def flower(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FLOWER, "remote", *args], env=env, capture_output=True, text=True, timeout=120)


def spawn(env: dict[str, str], *args: str) -> pexpect.spawn:
    return pexpect.spawn(FLOWER[0], [*FLOWER[1:], "remote", *args], env=env, encoding="utf-8",
                         timeout=120, dimensions=(50, 160))


def test_submit_answer_at_the_prompt_see_the_verdict_print_the_diff(deployment: Deployment, services: list[Service],
                                                                      tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    env = client_env(home)
    with ScriptedModel(hello_rules()) as model:
        service = serve(deployment, services, model)
        # a wrong token is refused in one sentence and nothing is saved; the right one is saved owner-only
        bad = flower(env, "--server", service.url, "--token", "not-a-token", "login")
        assert bad.returncode == 1 and "token" in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr
        config = home / ".config" / "flower" / "remote.toml"
        assert not config.exists()
        ok = flower(env, "--server", service.url, "--token", TOKENS["acme"], "login")
        assert ok.returncode == 0, ok.stderr
        assert config.stat().st_mode & 0o077 == 0 and TOKENS["acme"] in config.read_text()

        child = spawn(env, "submit", ASK_TEXT, "--rounds", "1")  # server and token from the config file
        child.expect(r"运行 (\S+) 已提交")
        run_id = child.match.group(1)
        child.expect("== 确认需求")
        child.expect(re.escape(f"? {ASK_TEXT} 用什么语言?"))
        child.expect(re.escape("1) Python"))
        child.expect("你的回答")  # the prompt on the last line waits for the answer
        assert run_status(service.client("acme"), run_id)["status"] == "running"
        child.send("1\r")
        child.expect(re.escape("+ Python"))  # the answer by its number: the option's text, as the run took it
        child.expect("== 工作")
        child.expect("派给 coder")  # the dispatch
        child.expect("报告交回来了:写好了 hello.py")  # the worker's report, its conclusion
        child.expect("判定#1")  # the judge's round
        child.expect("达成")  # its verdict
        child.expect(rf"\+ 运行 {run_id} succeeded")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before
    assert model.unmatched == [], [(r.system[:40], r.user[:80]) for r in model.unmatched]

    repo = deployment.repos["acme"]
    assert git(repo, "show", f"flower/{run_id}:hello.py") == "print('hello')\n"
    diff = flower(env, "diff", run_id)
    assert diff.returncode == 0 and "+++ b/hello.py" in diff.stdout and "+print('hello')" in diff.stdout, diff
    files = flower(env, "diff", run_id, "--files")
    assert files.returncode == 0 and files.stdout.split() == ["+1", "-0", "hello.py"], files
    one = flower(env, "diff", run_id, "--path", "hello.py")
    assert one.returncode == 0 and one.stdout == diff.stdout, (one, diff)
    other = flower(env, "diff", run_id, "--path", "README.md")
    assert other.returncode == 1 and "changed no file 'README.md'" in other.stderr, other.stderr
    listed = flower(env, "list")
    assert listed.returncode == 0 and run_id in listed.stdout and "succeeded" in listed.stdout, listed
    shown = flower(env, "show", run_id)
    assert shown.returncode == 0 and "succeeded" in shown.stdout and "hello.py  +1 -0" in shown.stdout, shown.stdout
    logs = flower(env, "logs", run_id)
    assert logs.returncode == 0 and "== 确认需求" in logs.stdout and "达成" in logs.stdout, logs
    again = flower(env, "attach", run_id)  # an ended run: its events replayed, then how it ended
    assert again.returncode == 0 and "派给 coder" in again.stdout and f"运行 {run_id} succeeded" in again.stdout, again
    late = flower(env, "cancel", run_id)
    assert late.returncode == 1 and "already ended" in late.stderr, late.stderr
    missing = flower(env, "show", "no-such-run")
    assert missing.returncode == 1 and "not found" in missing.stderr, missing.stderr


def test_ctrl_c_at_the_terminal_interrupts_the_run_on_the_service(deployment: Deployment, services: list[Service],
                                                                  tmp_path: Path):
    """The clarifier waits on a question nobody answers; Ctrl-C and a sentence redirect it over the API."""
    rules = interrupt_rules("打断我") + interrupt_rules("跟一半")
    home = tmp_path / "home"
    home.mkdir()
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        env = {**client_env(home), "FLOWER_SERVER": service.url, "FLOWER_TOKEN": TOKENS["acme"]}
        child = spawn(env, "submit", "打断我", "--clarify-only")
        child.expect(r"运行 (\S+) 已提交")
        run_id = child.match.group(1)
        child.expect(re.escape("? 用什么语言?"))
        child.expect("你的回答")
        child.send("\x03")  # Ctrl-C: a key at the raw terminal, not a signal that ends the client
        child.expect("要打断这一轮")
        child.send("别问了,用 Python\r")
        child.expect("已打断这一轮")
        child.expect(rf"\+ 运行 {run_id} succeeded")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
        # twice Ctrl-C: the client stops following, the run goes on; `cancel` then stops it
        child = spawn(env, "submit", "跟一半", "--clarify-only")
        child.expect(r"运行 (\S+) 已提交")
        other = child.match.group(1)
        child.expect("你的回答")
        child.send("\x03")
        child.expect("要打断这一轮")
        child.send("\x03")
        child.expect(f"不再跟看;运行 {other} 继续")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
        assert run_status(service.client("acme"), other)["status"] == "running"
        stopped = flower(env, "cancel", other)
        assert stopped.returncode == 0 and f"运行 {other} cancelled" in stopped.stdout, stopped
    # only the cancelled run may have asked past its script (its question was settled by the cancel)
    assert all("跟一半" in r.prompt for r in model.unmatched), \
        [(r.system[:40], r.prompt[:80], r.user[:80]) for r in model.unmatched]
    # the brief came from the rule that needs the interrupt's words in the conversation: they reached the model
    assert any("别问了,用 Python" in json.dumps(r.messages, ensure_ascii=False) for r in model.requests)
    events = [json.loads(line) for line in flower(env, "logs", run_id, "--json").stdout.splitlines()]
    said = [e for e in events if e["kind"] == "prompt"]  # the person's words, and nothing the CLI told the model
    assert [(e["text"], e["payload"]) for e in said] == [("别问了,用 Python", {"by": "person", "interrupt": True})], said
    cut = [e for e in events if e["kind"] in ("tool_result", "result") and e["payload"].get("interrupted")]
    assert [e["kind"] for e in cut] == ["tool_result", "result"] and not any(e["payload"]["is_error"] for e in cut)
    logs = flower(env, "logs", run_id)
    assert logs.returncode == 0 and "! 打断了,你说:别问了,用 Python" in logs.stdout, logs.stdout
    assert not any(w in logs.stdout for w in ("STOP what you are doing", "Request interrupted", "\nx ")), logs.stdout
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_a_script_answers_messages_interrupts_and_deletes_a_run_by_its_short_id(deployment: Deployment,
                                                                                services: list[Service],
                                                                                tmp_path: Path):
    """`flower remote answer|message|interrupt|delete`, one call each without a terminal: a line for a person, one
    JSON object with --json, the words from stdin with `-`, and one sentence when there is nothing to answer."""
    rules = [Rule(tool(ASK, {"question": "答我 用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER, prompt="答我"),
             Rule(say(BRIEF), system=CLARIFIER, prompt="答我", result="Python"),
             *interrupt_rules("打断我")]
    home = tmp_path / "home"
    home.mkdir()
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        env = {**client_env(home), "FLOWER_SERVER": service.url, "FLOWER_TOKEN": TOKENS["acme"], "FLOWER_LANG": "en"}
        answered = acme.post("/v1/runs", json={"ask": "答我", "options": {"clarify_only": True}}).json()
        q = wait_question(acme, answered["id"])
        said = subprocess.run([*FLOWER, "remote", "answer", "last", "-", "--json"], input="1\n", env=env,
                              capture_output=True, text=True, timeout=120)
        assert said.returncode == 0, said.stderr
        assert json.loads(said.stdout) == {"run": answered["id"], "short": answered["short"], "question_id": q["id"],
                                           "question": "答我 用什么语言?", "answer": "1", "accepted": True}
        assert wait_status(acme, answered["id"], ("succeeded", "failed"))["status"] == "succeeded"
        nothing = flower(env, "answer", answered["short"], "Go")
        assert nothing.returncode == 1 and nothing.stderr.count("\n") == 1, nothing.stderr
        assert f"run {answered['short']} has no open question: nothing to answer" in nothing.stderr, nothing.stderr

        cut = acme.post("/v1/runs", json={"ask": "打断我", "options": {"clarify_only": True}}).json()
        wait_question(acme, cut["id"])
        sent = flower(env, "message", cut["short"], "先记一下:只用标准库")
        assert sent.returncode == 0 and sent.stdout == f"+ sent to run {cut['short']} (it reads its inbox between " \
            "tool calls)\n", sent
        stopped = flower(env, "interrupt", "last", "别问了,用", "Python", "--json")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout) == {"run": cut["id"], "short": cut["short"], "text": "别问了,用 Python",
                                              "accepted": True}
        assert wait_status(acme, cut["id"], ("succeeded", "failed"))["status"] == "succeeded"
        gone = flower(env, "delete", cut["short"], "--json")
        assert gone.returncode == 0 and json.loads(gone.stdout)["deleted"], gone
        plain = flower(env, "delete", answered["short"])
        assert plain.returncode == 0 and plain.stdout == f"- run {answered['short']} deleted (its events, manifest and " \
            f"folder); its branch flower/{answered['id']} stays\n", plain
    assert model.unmatched == [], [(r.system[:40], r.user[:80]) for r in model.unmatched]
    mailbox = deployment.data / "runs" / cut["id"] / "mailbox"
    assert not mailbox.exists(), "deleted with its folder"


# -- terminal injection: a run's ask, text, questions and tool names reach the client's terminal as plain text ---------
HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x1b[2J\x9b2J\x9d0;t\x07\u202etxt.exe\u2066\rX\x08\x07"


def terminal_controls(raw: bytes) -> list[str]:
    """What a terminal would obey or hide in these bytes: ESC, C1 controls, bidi overrides and isolates."""
    return [c for c in raw.decode("utf-8") if c == "\x1b" or "\x80" <= c <= "\x9f" or "\u202a" <= c <= "\u202e"
            or "\u2066" <= c <= "\u2069"]


def test_logs_list_and_show_print_a_hostile_runs_text_without_its_escapes(deployment: Deployment,
                                                                          services: list[Service], tmp_path: Path):
    """The clarifier's question and options, a tool name it chose and its text all carry escapes (an ask cannot:
    it is refused at submit, test_bad_characters.py); the bytes each command writes (drawn or --json) carry none,
    and the words are still there."""
    rules = [Rule(tool(ASK, {"question": "HOSTILE-Q" + HOSTILE, "options": ["HOSTILE-OPT" + HOSTILE]}),
                  tool("HOSTILE-TOOL" + HOSTILE, {"command": HOSTILE}), say("HOSTILE-TEXT" + HOSTILE + "\n" + BRIEF),
                  system=CLARIFIER, prompt="HOSTILE-ASK")]
    home = tmp_path / "home"
    home.mkdir()
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        api = service.client("acme")
        r = api.post("/v1/runs", json={"ask": "HOSTILE-ASK", "options": {"clarify_only": True,
                                                                                  "timeout_s": 0}})
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        assert wait_status(api, run_id, ("succeeded", "failed"))["status"] == "succeeded"
        env = {**client_env(home), "FLOWER_SERVER": service.url, "FLOWER_TOKEN": TOKENS["acme"]}
        seen = {}
        for args in (("logs", run_id), ("logs", run_id, "--json"), ("list",), ("list", "--json"),
                     ("show", run_id), ("show", run_id, "--json")):
            p = subprocess.run([*FLOWER, "-v", "remote", *args], env=env, capture_output=True, timeout=120)
            assert p.returncode == 0, (args, p.stderr)
            assert terminal_controls(p.stdout) == [] and terminal_controls(p.stderr) == [], (args, p.stdout)
            seen[args[0] + (" --json" if "--json" in args else "")] = p.stdout.decode()
    assert model.unmatched == [], [(r.system[:40], r.prompt[:80]) for r in model.unmatched]
    words = {"logs": ["HOSTILE-Q", "HOSTILE-OPT", "* HOSTILE-TOOL", "HOSTILE-TEXT"], "list": ["HOSTILE-ASK"],
             "show": ["HOSTILE-ASK"]}
    for command, expected in words.items():
        assert all(w in seen[command] for w in expected), (command, seen[command])
    # the --json lines keep the run's data whole: the controls are escaped, not lost
    events = [json.loads(line) for line in seen["logs --json"].splitlines()]
    assert any(HOSTILE in e["text"] for e in events if e["kind"] == "text"), events
    assert json.loads(seen["show --json"])["ask"] == "HOSTILE-ASK"


def test_a_reader_that_goes_away_ends_flower_remote_quietly_as_other_tools_do(deployment: Deployment,
                                                                               services: list[Service],
                                                                               tmp_path: Path):
    """``flower remote … | head``: the reader leaves after a line, or before the first; flower says nothing on
    stderr and ends as a tool SIGPIPE ended (141), through a real pipe — never "something went wrong"."""
    rules = [Rule(tool(ASK, {"question": "用什么语言?", "options": ["Python"]}), say(BRIEF), system=CLARIFIER)]
    home = tmp_path / "home"
    home.mkdir()
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        api = service.client("acme")
        ids = [api.post("/v1/runs", json={"ask": f"任务{i}", "options": {"clarify_only": True}}).json()["id"]
               for i in range(3)]
        wait_question(api, ids[0])  # its events so far: what `logs` prints
        env = {**client_env(home), "FLOWER_SERVER": service.url, "FLOWER_TOKEN": TOKENS["acme"]}
        command = " ".join(FLOWER[:2]) + ' "' + FLOWER[2] + '" remote'
        for args in (f"logs {ids[0]}", "list", f"show {ids[0]}", "list --json"):
            piped = subprocess.run(["bash", "-c", f"set -o pipefail; {command} {args} | head -c 1 >/dev/null"],
                                   env=env, capture_output=True, text=True, timeout=120)
            assert piped.stderr == "" and piped.returncode in (0, 141), (args, piped.returncode, piped.stderr)
            read, write = os.pipe()
            os.close(read)  # the reader gone before the first byte: the first write is refused, every time
            try:
                gone = subprocess.run([*FLOWER, "remote", *args.split()], env=env, stdout=write,
                                      stderr=subprocess.PIPE, text=True, timeout=120)
            finally:
                os.close(write)
            assert gone.stderr == "" and gone.returncode == 141, (args, gone.returncode, gone.stderr)

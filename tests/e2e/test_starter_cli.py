"""The starter flow through the real CLI and the scripted model: clarify → goal → work under the judge,
the person's three options, continuity across a kill -9, waking with a new sentence, a read-only probe."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from flower.core.channel import HumanChannel, MailboxAnswers
from flower.core.events import Event
from flower.core.runtime import Runtime
from flower.docs import Brief, Goal
from flower.testing import Rule, ScriptedModel, say, tool
from flower.workflow import GOAL_KEY, Workflow, starter_flow, starter_paths, wake_state
from flower.workflow.goal import ACCEPT, AMEND, DISAGREE

pytestmark = pytest.mark.cli

ASK = HumanChannel.tool_name
CLARIFIER, JUDGE, LEAD = "你是需求确认者", "你是判定者", "你是协调者"
BRIEF = "## 目标\n做一个 hello.py\n## 验收标准\n运行打印 hello\n## 边界\n只用标准库\n## 未知与假设\n用 Python 3"
GOAL = "## 目标\nhello.py 打印问候\n## 检查清单\n1. python hello.py 输出 hello\n2. 支持 --name"
ACHIEVED = "## 结论\n达成\n## 理由\n两条检查都过了\n## 未通过\n无"
NOT_YET = "## 结论\n未达成\n## 理由\n没有 --name 参数\n## 未通过\n- 支持 --name"
UNVERIFIABLE = "## 结论\n无法验证\n## 理由\n这里没有 macOS\n## 未通过\n- 在 macOS 上运行"
REPORT = "## 结论\n{what}\n## 证据\n跑过了\n## 交付物\nhello.py\n## 未验证\n无"


def _dispatch(marker: str) -> Any:
    return tool("Agent", {"description": "实现 hello.py", "prompt": f"{marker} 写 hello.py", "subagent_type": "coder",
                          "run_in_background": False})


def _runtime(ws: Path, run_dir: Path) -> Runtime:
    return Runtime(workspace=ws, run_dir=run_dir)


class Person:
    """The other side of the mailbox: answers each question with the next scripted answer."""

    def __init__(self, box: Path, answers: list[str]) -> None:
        self.box, self.answers, self.asked = box, list(answers), []  # type: list[dict[str, Any]]
        self.task: asyncio.Task[None] | None = None

    async def _serve(self) -> None:
        while True:
            for q in MailboxAnswers.pending(self.box):
                if any(q["id"] == a["id"] for a in self.asked):
                    continue
                self.asked.append(q)
                if self.answers:
                    MailboxAnswers.answer(self.box, q["id"], self.answers.pop(0))
            await asyncio.sleep(0.05)

    def __enter__(self) -> "Person":
        self.task = asyncio.get_running_loop().create_task(self._serve())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.task
        self.task.cancel()


def _flow(ask: str, ws: Path, run_dir: Path, box: Path, **kw: Any) -> Workflow:
    wf = starter_flow(ask, workspace=ws, run_dir=run_dir, **kw)
    wf.channel.answers = MailboxAnswers(box, poll_s=0.05)
    return wf


def _freeze(ws: Path, *, goal: bool = True) -> None:
    """A folder that already went through clarification (and goal setting)."""
    paths = starter_paths(ws, run_dir=ws.parent / "runs")
    Brief.parse(BRIEF).write(paths.brief)
    if goal:
        Goal.parse(GOAL).write(paths.goal)


def _steps(run_dir: Path) -> list[str]:
    return [r["step"] for r in json.loads((run_dir / "manifest.json").read_text())]


# -- 1. the whole flow -------------------------------------------------------------------------
async def test_the_whole_starter_flow_clarifies_sets_the_goal_and_works_two_rounds(workspace, tmp_path, scripted):
    run_dir, box = tmp_path / "runs", tmp_path / "mailbox"
    out = workspace / "hello.py"
    rules = [
        Rule(tool(ASK, {"question": "用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER,
             prompt="帮我做一个 hello"),
        Rule(say(BRIEF), system=CLARIFIER, result="Python"),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        Rule(_dispatch("WORKER-TASK-1"), system=LEAD, agent=False, prompt="把上面的需求做成"),
        Rule(tool("Write", {"file_path": str(out), "content": "print('hello')\n"}), agent=True,
             prompt="WORKER-TASK-1"),
        Rule(say(REPORT.format(what="写好了 v1")), agent=True, prompt="WORKER-TASK-1", result="hello.py"),
        Rule(say("第一轮:hello.py 写好了"), system=LEAD, agent=False, result="写好了 v1"),
        Rule(say(NOT_YET), system=JUDGE, prompt="第 1 轮工作结束了"),
        Rule(_dispatch("WORKER-TASK-2"), system=LEAD, agent=False, user="目标尚未达成"),
        Rule(tool("Write", {"file_path": str(out), "content": "import sys\nprint('hello', *sys.argv[2:])\n"}),
             agent=True, prompt="WORKER-TASK-2"),
        Rule(say(REPORT.format(what="加了 --name v2")), agent=True, prompt="WORKER-TASK-2", result="hello.py"),
        Rule(say("第二轮:加了 --name"), system=LEAD, agent=False, result="加了 --name v2"),
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 2 轮工作结束了"),
    ]
    events: list[Event] = []
    with scripted(rules) as model:
        wf = _flow("帮我做一个 hello 程序", workspace, run_dir, box, timeout_s=60)
        with Person(box, ["1"]) as person:
            ctx = await asyncio.wait_for(wf.run(_runtime(workspace, run_dir), on_event=events.append), 240)

    assert "_failed_at" not in ctx and "_aborted" not in ctx, ctx.get("_results")
    assert ctx["_woke"] == 1 and ctx["_lineage"].steps == json.loads((run_dir / "lineage.json").read_text())["steps"]
    assert [q["question"] for q in person.asked] == ["用什么语言?"]
    paths = starter_paths(workspace, run_dir=run_dir)
    assert paths.brief == workspace / ".flower" / "notes" / "需求.md"
    assert Brief.load(paths.brief) == Brief.parse(BRIEF) and "做一个 hello.py" in ctx["确认需求"]
    assert Goal.load(paths.goal).checks == ["python hello.py 输出 hello", "支持 --name"]
    assert "sys.argv" in out.read_text()  # the worker's second round is on disk

    lead = [r for r in model.conversation if LEAD in r.system and not r.is_subagent]
    assert len({r.session for r in lead}) == 1, "round 2 continues the same work session"
    round2 = [r for r in lead if "目标尚未达成" in r.user]
    assert round2 and "没有 --name 参数" in round2[0].user and "做一个 hello.py" in round2[0].prompt
    assert "需求方的原话" not in lead[0].prompt, "the clarification exchange never reaches the coordinator"
    judges = [r for r in model.conversation if JUDGE in r.system and "轮工作结束了" in r.prompt]
    assert len({r.session for r in judges}) == 2 and not {r.session for r in judges} & {lead[0].session}

    assert _steps(run_dir) == ["确认需求", "设定目标", "工作", "工作·判定#1", "工作#round2", "工作·判定#2"]
    sessions = json.loads((run_dir / "lineage.json").read_text())["steps"]
    assert set(sessions) == {"确认需求", "设定目标", "工作"} and sessions["工作"] == lead[0].session
    steps = [e for e in events if e.kind == "step"]
    assert [(e.text, e.payload) for e in steps] == [
        ("确认需求", {"index": 0, "total": 3, "resumed": False, "woke": 1}),
        ("设定目标", {"index": 1, "total": 3, "resumed": False, "woke": 1}),
        ("工作", {"index": 2, "total": 3, "resumed": False, "woke": 1}),
    ]
    asked = [e for e in events if e.kind == "ask"]
    assert asked and asked[0].text == "用什么语言?", "the workflow wired the channel to the same output"
    assert wf.channel.on_event is None, "and unwired it afterwards"
    log = paths.log.read_text()
    assert "用什么语言?" in log and "answered" in log
    assert model.unmatched == []


# -- 2. the verdict cannot be reached here: the person decides ----------------------------------
def _unreachable_rules(then_achieved: bool) -> list[Rule]:
    rules = [Rule(say("第一轮做完了"), system=LEAD, agent=False, prompt="把上面的需求做成"),
             Rule(say(UNVERIFIABLE), system=JUDGE, prompt="第 1 轮工作结束了")]
    if then_achieved:
        rules += [Rule(say("按意见改完了"), system=LEAD, agent=False, user="无法验证"),
                  Rule(say(ACHIEVED), system=JUDGE, prompt="第 2 轮工作结束了")]
    return rules


@pytest.mark.parametrize("branch", ["accept", "amend", "disagree", "free text", "nobody"])
async def test_unverifiable_asks_the_person_with_three_options(workspace, tmp_path, scripted, branch):
    run_dir, box = tmp_path / "runs", tmp_path / "mailbox"
    _freeze(workspace)
    answers = {"accept": ["1"], "amend": ["2", "在 Linux 上运行 hello.py 就算达成"], "disagree": ["3"],
               "free text": ["能验证的,用 docker 跑一下"], "nobody": []}[branch]
    with scripted(_unreachable_rules(branch not in ("accept", "nobody"))) as model:
        wf = _flow("", workspace, run_dir, box, timeout_s=0 if branch == "nobody" else 60)
        with Person(box, answers) as person:
            ctx = await asyncio.wait_for(wf.run(_runtime(workspace, run_dir)), 180)
    assert model.unmatched == []
    log = starter_paths(workspace, run_dir=run_dir).log.read_text()
    assert "无法验证" in log and all(o in log for o in (ACCEPT, AMEND, DISAGREE))
    if branch == "nobody":
        assert ctx["_failed_at"] == "工作" and "没有人回答" in ctx["_aborted"]
        assert "工作" not in ctx and _steps(run_dir) == ["工作", "工作·判定#1"], "no second round after an abort"
        assert person.asked == []  # timeout_s=0: nothing was even posted
        return
    assert [q["options"] for q in person.asked][0] == [ACCEPT, AMEND, DISAGREE]
    assert "_failed_at" not in ctx and ctx["工作"]
    if branch == "accept":
        assert _steps(run_dir) == ["工作", "工作·判定#1"]
        return
    assert _steps(run_dir) == ["工作", "工作·判定#1", "工作#round2", "工作·判定#2"]
    round2 = next(r for r in model.conversation if "无法验证" in r.user and LEAD in r.system)
    if branch == "amend":
        goal = Goal.load(starter_paths(workspace, run_dir=run_dir).goal)
        assert "在 Linux 上运行 hello.py" in goal.statement and ctx[GOAL_KEY].statement == goal.statement
        assert "人修改了目标" in round2.user and "在 Linux 上运行 hello.py" in round2.user
        judge2 = next(r for r in model.conversation if "第 2 轮工作结束了" in r.prompt)
        assert "在 Linux 上运行 hello.py" in judge2.prompt, "the next verdict judges the amended goal"
    else:
        said = "能验证的,用 docker 跑一下" if branch == "free text" else DISAGREE
        assert "人不同意" in round2.user and said in round2.user


# -- 3. continuity: kill -9 in the middle of the work, run again in the same folder -------------
CHILD = """
import asyncio, json, sys
from flower.core.channel import MailboxAnswers
from flower.core.runtime import Runtime
from flower.workflow import starter_flow

ws, run_dir, box, ask = sys.argv[1:5]

async def main():
    wf = starter_flow(ask, workspace=ws, run_dir=run_dir, timeout_s=0, rounds=1)
    wf.channel.answers = MailboxAnswers(box)
    def show(e):
        if e.kind == "step":
            print(json.dumps({"kind": e.kind, "text": e.text, "payload": e.payload}, ensure_ascii=False), flush=True)

    ctx = await wf.run(Runtime(workspace=ws, run_dir=run_dir), on_event=show)
    print(json.dumps({"failed_at": ctx.get("_failed_at"), "woke": ctx["_woke"],
                      "ran": list(ctx["_results"]), "work": ctx.get("工作")}, ensure_ascii=False), flush=True)

asyncio.run(main())
"""


def _child(script: Path, ws: Path, run_dir: Path, box: Path, ask: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(script), str(ws), str(run_dir), str(box), ask], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


async def test_a_killed_run_continues_its_work_session_when_run_again(workspace, tmp_path):
    run_dir, box, script = tmp_path / "runs", tmp_path / "mailbox", tmp_path / "child.py"
    script.write_text(CHILD)
    # 30 s unless the test says stop: the CLI refuses a bare `sleep 30`, and it runs Bash in its own process
    # group, so the kill below leaves the build behind (as a real crash would); the stop file ends it.
    stop = tmp_path / "stop-the-build"
    long_build = (f"{sys.executable} -c \"import os, time; "
                  f"[time.sleep(0.1) for _ in range(300) if not os.path.exists('{stop}')]\"")
    sleeping = Rule(tool("Bash", {"command": long_build, "description": "long build"}), agent=True,
                    prompt="WORKER-LONG")
    rules = [
        Rule(say("[接着做] 收到,已核对:hello.py 已经在了,完成"), system=LEAD, agent=False, user="[接着做]"),
        Rule(say(BRIEF), system=CLARIFIER, prompt="帮我做一个 hello"),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        Rule(_dispatch("WORKER-LONG"), system=LEAD, agent=False, prompt="把上面的需求做成"),
        sleeping,
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了"),
    ]
    with ScriptedModel(rules) as model:
        env = {**os.environ, **model.env}
        first = _child(script, workspace, run_dir, box, "帮我做一个 hello 程序", env)
        try:
            deadline = time.monotonic() + 120
            while not sleeping.used:
                assert first.poll() is None, first.communicate()
                assert time.monotonic() < deadline, "the worker never got to its long command"
                await asyncio.sleep(0.1)
            seen = len(model.conversation)
            await asyncio.sleep(1.0)  # the CLI is now running the 30 s build
            assert first.poll() is None and len(model.conversation) == seen, "killed in the middle of the build"
            os.killpg(first.pid, signal.SIGKILL)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
            first.wait(10)
            stop.touch()
        lead_first = [r for r in model.conversation if LEAD in r.system and not r.is_subagent]
        work_session = lead_first[0].session
        assert json.loads((run_dir / "lineage.json").read_text())["steps"]["工作"] == work_session
        asked_before = len([r for r in model.conversation if CLARIFIER in r.system or "请为它设定目标" in r.prompt])

        second = _child(script, workspace, run_dir, box, "", env)
        stdout, stderr = await asyncio.to_thread(second.communicate, timeout=180)
    assert second.returncode == 0, stderr[-3000:]
    final = json.loads(stdout.strip().splitlines()[-1])
    assert final["failed_at"] is None and final["woke"] == 2 and final["ran"] == ["工作"], stdout[-2000:]
    assert "hello.py 已经在了" in final["work"]
    resumed = [r for r in model.conversation if "[接着做]" in r.user and not r.is_subagent]
    assert resumed and resumed[0].session == work_session, "the work step resumes the killed session"
    assert any("WORKER-LONG" in json.dumps(m, ensure_ascii=False) for m in resumed[0].messages), \
        "the resumed session carries the earlier conversation"
    asked_after = len([r for r in model.conversation if CLARIFIER in r.system or "请为它设定目标" in r.prompt])
    assert asked_after == asked_before, "the brief and the goal are not asked again"
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"kind"')]
    assert [(e["text"], e["payload"]) for e in events if e["kind"] == "step"] == [
        ("工作", {"index": 2, "total": 3, "resumed": True, "woke": 2})], "skipped steps do not start"


# -- 4. waking with a new sentence -----------------------------------------------------------------
async def test_a_sentence_at_wake_up_lands_in_brief_goal_and_coordinator(workspace, tmp_path, scripted):
    run_dir, box = tmp_path / "runs", tmp_path / "mailbox"
    _freeze(workspace)
    said = "再加一个 --shout 选项,全大写输出"
    new_goal = GOAL + "\n3. --shout 输出全大写"
    rules = [Rule(say(new_goal), system=JUDGE, prompt="请为它设定目标"),
             Rule(say("加好了 --shout"), system=LEAD, agent=False, prompt="把上面的需求做成"),
             Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了")]
    with scripted(rules) as model:
        ctx = await _flow(said, workspace, run_dir, box, timeout_s=0).run(_runtime(workspace, run_dir))
        assert "_failed_at" not in ctx and list(ctx["_results"]) == ["设定目标", "工作"]
        # the same words again: not appended twice (clarify_only: nothing but the wake-up runs)
        again = await _flow(said, workspace, run_dir, box, clarify_only=True).run(_runtime(workspace, run_dir))
        assert again["_results"] == {} and again["_woke"] == 2
    paths = starter_paths(workspace, run_dir=run_dir)
    text = paths.brief.read_text()
    assert text.count(said) == 1 and "唤醒时追加" in text
    setter = next(r for r in model.conversation if "请为它设定目标" in r.prompt)
    assert said in setter.prompt, "the goal is set again from the amended brief"
    assert len(Goal.load(paths.goal).checks) == 3
    lead = next(r for r in model.conversation if LEAD in r.system)
    assert said in lead.prompt and "--shout 输出全大写" in lead.prompt, "the coordinator gets the sentence and the new goal"
    judge = next(r for r in model.conversation if "第 1 轮工作结束了" in r.prompt)
    assert "--shout 输出全大写" in judge.prompt, "the judge checks the new goal, not the old one"
    assert model.unmatched == []


# -- 5. wake_state writes nothing ------------------------------------------------------------------------
async def test_wake_state_on_a_busy_folder_changes_nothing(workspace, tmp_path, scripted, monkeypatch, tree_hash):
    run_dir, box = tmp_path / "runs", tmp_path / "mailbox"
    _freeze(workspace)
    rules = [Rule(say("做完了"), system=LEAD, agent=False, prompt="把上面的需求做成"),
             Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了")]
    with scripted(rules):
        ctx = await _flow("", workspace, run_dir, box).run(_runtime(workspace, run_dir))
    assert "_failed_at" not in ctx
    notes = starter_paths(workspace, run_dir=run_dir).notes
    (notes / "交接-工作.md").write_text("## 正在做\nx\n## 下一步\ny\n")
    monkeypatch.chdir(tmp_path)
    before = tree_hash(tmp_path)
    state = wake_state(workspace, run_dir="runs")
    again = wake_state(workspace, run_dir="runs", isolate=True)  # a folder that does not exist: still nothing
    assert tree_hash(tmp_path) == before
    assert state == {"waking": True, "brief": notes / "需求.md", "goal": notes / "目标.md", "checks": 2, "woke": 1,
                     "steps": {"工作": ctx["_sessions"]["工作"]}}
    assert not again["waking"] and again["brief"] == tmp_path / ".flower-ws" / "notes" / "需求.md"
    assert again["checks"] == 0 and (again["woke"], again["steps"]) == (state["woke"], state["steps"]), \
        "the run dir is the same whatever the workbench"

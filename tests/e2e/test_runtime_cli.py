"""Runtime through the real CLI: retries that resume, interrupts, handoff instead of compaction."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from flower.core.agent import AgentSpec, HandoffPolicy
from flower.core.events import Event
from flower.core.resilience import Resilience
from flower.core.runtime import Runtime
from flower.testing import Rule, fail, say, tool, too_long

pytestmark = pytest.mark.cli

FAST = Resilience(base_delay=0.01, max_delay=0.05, probe_interval=0.05, max_offline_wait=5)
HANDOFF_DOC = "## 正在做\n写 a.txt\n## 已决定\n用 Write\n## 死路\n无\n## 下一步\n写 b.txt\n## 现场\na.txt 已写"
SPEC = AgentSpec("工人", "", allowed_tools=["Read", "Bash"], permission_mode="default", workbench=False)


def _runtime(ws: Path, tmp_path: Path, **kw) -> Runtime:
    return Runtime(workspace=ws, run_dir=tmp_path / "runs", **kw)


async def test_529_beyond_the_cli_retries_resumes_the_same_session(workspace, tmp_path, scripted):
    events: list[Event] = []
    rules = [Rule(fail(529), fail(529), prompt="do the thing", agent=False),  # the CLI's own two tries
             Rule(say("recovered and finished"), user=FAST.resume_prompt)]
    with scripted(rules) as model:
        rt = _runtime(workspace, tmp_path, resilience=FAST)
        r = await rt.run(SPEC, "do the thing", step_name="工作", on_event=events.append)
    assert r.ok and r.text == "recovered and finished" and r.resumed and r.attempts == 2
    first, *_, last = model.conversation
    assert [x.status for x in model.conversation] == [529, 529, 200]
    assert last.session == first.session == r.session_id, "the retry must resume the same session"
    retries = [e for e in events if e.kind == "retry"]
    assert len(retries) == 1 and "529" in retries[0].payload["error"]
    rows = json.loads((tmp_path / "runs" / "manifest.json").read_text())
    assert [(x["step"], x["ok"], x["attempts"], x["run"]) for x in rows] == [("工作", True, 2, rt.run_id)]


async def test_401_ends_at_once_with_a_clear_error(workspace, tmp_path, scripted):
    events: list[Event] = []
    with scripted([Rule(fail(401), prompt="go", repeat=True)]) as model:
        r = await _runtime(workspace, tmp_path, resilience=FAST).run(SPEC, "go", on_event=events.append)
    assert not r.ok and r.attempts == 1 and "api key" in (r.error or "").lower()
    assert not [e for e in events if e.kind == "retry"]
    assert len(model.conversation) == 2  # only the CLI's own retry, none of ours


async def test_retries_stop_at_max_attempts(workspace, tmp_path, scripted):
    with scripted([Rule(fail(529), prompt="go", repeat=True)]) as model:
        policy = Resilience(max_attempts=2, base_delay=0.01, probe_interval=0.05)
        r = await _runtime(workspace, tmp_path, resilience=policy).run(SPEC, "go")
    assert not r.ok and r.attempts == 2
    assert len(r.errors) == 2 and all("529" in e for e in r.errors)  # the CLI's synthetic error texts
    assert "529" not in r.text
    assert len(model.conversation) == 4  # 2 runtime attempts × 2 CLI tries: outer retries multiply


async def test_an_interrupt_resumes_the_same_session_without_counting_an_attempt(workspace, tmp_path, scripted):
    events: list[Event] = []
    rules = [Rule(tool("Bash", {"command": "sleep 20", "description": "wait"}), prompt="long job"),
             Rule(say("switched to plan B"), user="use plan B")]
    with scripted(rules) as model:
        rt = _runtime(workspace, tmp_path)
        spec = AgentSpec("工人", "", allowed_tools=["Bash"], workbench=False)

        def on_event(e: Event) -> None:
            events.append(e)
            if e.kind == "tool_call":
                asyncio.get_running_loop().call_later(0.5, rt.interrupt, "use plan B")

        r = await asyncio.wait_for(rt.run(spec, "long job", on_event=on_event), 60)
    assert r.ok and r.text == "switched to plan B" and r.attempts == 1
    resumed = [x for x in model.conversation if "use plan B" in x.user]
    assert resumed and resumed[0].session == model.conversation[0].session == r.session_id
    assert "interrupted" in resumed[0].user and Runtime.INTERRUPT_NOTE.strip()[:10] in resumed[0].user
    assert [e.tool for e in events if e.kind == "tool_call"] == ["Bash"]


async def test_prompt_too_long_mid_step_hands_off_to_a_fresh_session(workspace, tmp_path, scripted):
    events: list[Event] = []
    rules = [Rule(tool("Bash", {"command": "echo step-one", "description": "x"}), prompt="big task"),
             Rule(too_long(), result="step-one"),
             Rule(say(HANDOFF_DOC), user="[交接]"),
             Rule(say("finished after handoff"), prompt="写 b.txt")]
    with scripted(rules) as model:
        rt = _runtime(workspace, tmp_path, workbench=True)
        r = await rt.run(SPEC, "big task", step_name="工作", on_event=events.append)
    assert r.ok and r.text == "finished after handoff", r.error
    old = model.conversation[0].session
    assert r.retired == [old] and r.session_id != old
    fresh = [x for x in model.conversation if "写 b.txt" in x.prompt]
    assert fresh and fresh[0].session == r.session_id and not any(m["role"] == "assistant" for m in fresh[0].messages), "fresh, not a resume"
    note = rt.workbench.notes / "交接-工作.md"
    assert note.is_file() and "写 b.txt" in note.read_text()
    phases = [e.payload["phase"] for e in events if e.kind == "handoff"]
    assert phases == ["writing", "done"]
    done = [e for e in events if e.kind == "handoff"][-1].payload
    assert done["degraded"] is False and done["path"] == str(note) and len(done["sections"]) == 5


async def test_usage_crossing_warn_at_then_at_hands_off_without_any_error(workspace, tmp_path, scripted):
    events: list[Event] = []
    policy = HandoffPolicy(window=100_000)  # at=50 000, warn_at=30 000
    rules = [Rule(tool("Bash", {"command": "echo one", "description": "x"}, usage={"input_tokens": 35_000}),
                  prompt="big task"),
             Rule(tool("Bash", {"command": "echo two", "description": "x"}, usage={"input_tokens": 60_000}),
                  result="one"),
             Rule(say(HANDOFF_DOC), user="[交接]"),
             Rule(say("done fresh", usage={"input_tokens": 2_000}), prompt="写 b.txt")]
    with scripted(rules) as model:
        rt = _runtime(workspace, tmp_path, workbench=True, handoff=policy)
        r = await rt.run(SPEC, "big task", step_name="工作", on_event=events.append)
    assert r.ok and r.text == "done fresh" and len(r.retired) == 1 and r.attempts == 1
    assert model.unmatched == []
    assert [e.payload["phase"] for e in events if e.kind == "handoff"] == ["near", "writing", "done"]
    assert r.context == 2_000  # the level restarted with the fresh session
    # a second handoff archives the first document
    rules2 = [Rule(say("big", usage={"input_tokens": 60_000}), prompt="again"), Rule(say(HANDOFF_DOC), user="[交接]"),
              Rule(say("ok", usage={"input_tokens": 10}), prompt="写 b.txt")]
    with scripted(rules2):
        await rt.run(SPEC, "again", step_name="工作")
    assert len(list((rt.workbench.notes / "archive" / "交接").glob("工作-*.md"))) == 1


async def test_max_generations_ends_with_a_diagnostic_not_a_loop(workspace, tmp_path, scripted):
    rules = [Rule(say("still huge", usage={"input_tokens": 90_000}), agent=False, repeat=True, user="task"),
             Rule(say(HANDOFF_DOC), user="[交接]", repeat=True),
             Rule(say("still huge", usage={"input_tokens": 90_000}), prompt="写 b.txt", repeat=True)]
    with scripted(rules) as model:
        rt = _runtime(workspace, tmp_path, handoff=HandoffPolicy(window=100_000, max_generations=2))
        r = await rt.run(SPEC, "task", step_name="工作")
    assert not r.ok and len(r.retired) == 2 and "max_generations=2" in (r.error or "")
    assert len(model.sessions()) == 3  # the first session and two fresh ones, then it stops


def test_no_credentials_fails_at_construction(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError, match="No Anthropic credentials"):
        Runtime(workspace=workspace, run_dir=tmp_path / "runs")


async def test_an_interrupt_through_the_channel_mailbox_resumes_the_same_session(workspace, tmp_path, scripted):
    """The service's path: the person's words land in the mailbox; the runtime polls the channel."""
    from flower.core.channel import HumanChannel, MailboxAnswers

    mailbox = tmp_path / "mailbox"
    rules = [Rule(tool("Bash", {"command": "sleep 20", "description": "wait"}), prompt="long job"),
             Rule(say("took the new direction"), user="go with plan C")]
    with scripted(rules) as model:
        rt = _runtime(workspace, tmp_path)
        rt.channel = HumanChannel(answers=MailboxAnswers(mailbox), timeout_s=0)
        spec = AgentSpec("工人", "", allowed_tools=["Bash"], workbench=False)

        def on_event(e: Event) -> None:
            if e.kind == "tool_call":
                asyncio.get_running_loop().call_later(0.5, MailboxAnswers.interrupt, mailbox, "go with plan C")

        r = await asyncio.wait_for(rt.run(spec, "long job", on_event=on_event), 60)
    assert r.ok and r.text == "took the new direction" and r.attempts == 1
    resumed = [x for x in model.conversation if "go with plan C" in x.user]
    assert resumed and resumed[0].session == model.conversation[0].session == r.session_id
    assert not (mailbox / "interrupt.json").exists(), "the words are taken once"


async def test_an_interrupt_lands_while_the_turn_waits_on_a_question(workspace, tmp_path, scripted):
    """A turn blocked on `ask` sends no message for as long as nobody answers: the interrupt must not wait for one."""
    from flower.core.channel import HumanChannel

    ch = HumanChannel(timeout_s=None)  # nobody answers, ever
    rules = [Rule(tool(ch.tool_name, {"question": "which database?"}), prompt="pick a db"),
             Rule(say("going with sqlite as told"), user="use sqlite")]
    with scripted(rules) as model:
        rt = _runtime(workspace, tmp_path)
        rt.channel = ch
        spec = AgentSpec("工人", "", allowed_tools=ch.tool_names, mcp_servers=ch.mcp_servers(), workbench=False)

        def on_event(e: Event) -> None:
            if e.kind == "tool_call":
                asyncio.get_running_loop().call_later(0.5, rt.interrupt, "use sqlite")

        r = await asyncio.wait_for(rt.run(spec, "pick a db", on_event=on_event), 60)
    assert r.ok and r.text == "going with sqlite as told" and r.attempts == 1
    resumed = [x for x in model.conversation if "use sqlite" in x.user]
    assert resumed and resumed[0].session == r.session_id == model.conversation[0].session
    assert ch.pending() == [] and [a.state for a in ch.asks] == ["declined"]


async def test_rescue_files_the_step_in_flight_once(workspace, tmp_path, scripted):
    rules = [Rule(tool("Bash", {"command": "echo hi", "description": "x"}), prompt="job"),
             Rule(say("done"), result="hi")]
    with scripted(rules):
        rt = _runtime(workspace, tmp_path)
        rescued: list[list[dict]] = []

        def on_event(e: Event) -> None:
            if e.kind == "tool_call":  # as a SIGTERM handler would, mid-step
                rt.rescue()
                rescued.append(json.loads(rt.manifest_path.read_text()))

        r = await rt.run(SPEC, "job", step_name="工作", on_event=on_event)
    assert rescued and [row["error"] for row in rescued[0]] == ["killed-by-signal"]
    rows = json.loads(rt.manifest_path.read_text())
    assert len(rows) == 1 and rows[0]["step"] == "工作" and r in rt.results and len(rt.results) == 1


async def test_observers_watch_every_run_without_a_subclass(workspace, tmp_path, scripted):
    """What cli/drive.py and the sandbox entrypoint need: a name when a run starts, its result when it ends."""
    seen: list[str] = []
    rules = [Rule(fail(529), fail(529), prompt="first", agent=False), Rule(say("one"), user=FAST.resume_prompt),
             Rule(say("two"), prompt="second")]
    with scripted(rules):
        rt = _runtime(workspace, tmp_path, resilience=FAST)
        rt.on_attempt += [lambda name: seen.append(f"start {name}"), lambda name: seen.append(f"also {name}")]
        rt.on_result.append(lambda r: seen.append(f"end {r.step} {r.text} attempts={r.attempts}"))
        await rt.run(SPEC, "first", step_name="甲")
        await rt.run(SPEC, "second")
    assert seen == ["start 甲", "also 甲", "end 甲 one attempts=2", "start 工人", "also 工人", "end 工人 two attempts=1"]


async def test_the_handoff_turn_is_not_held_to_the_steps_budget(workspace, tmp_path, scripted):
    """The step's max_budget_usd would stop the turn that writes the handoff, and the doc would be a degraded one.

    The work turn costs nothing (an overflow); the handoff turn alone is far over the step's $0.01 budget.
    """
    spec = replace(SPEC, max_budget_usd=0.01)
    events: list[Event] = []
    rules = [Rule(tool("Bash", {"command": "echo step-one", "description": "x"}), prompt="big task"),
             Rule(too_long(), result="step-one"),
             Rule(say(HANDOFF_DOC, usage={"input_tokens": 150_000, "output_tokens": 20_000}), user="[交接]"),
             Rule(say("finished after handoff"), prompt="写 b.txt")]
    with scripted(rules) as model:
        rt = _runtime(workspace, tmp_path, workbench=True)
        r = await rt.run(spec, "big task", step_name="工作", on_event=events.append)
    done = [e for e in events if e.kind == "handoff"][-1].payload
    assert done["degraded"] is False, "the handoff turn was cut short: it ran under the step's budget"
    assert r.ok and r.text == "finished after handoff" and model.unmatched == [], r.error
    assert "写 b.txt" in (rt.workbench.notes / "交接-工作.md").read_text()


async def test_keep_denials_reaches_the_store_that_resumes_the_session(workspace, tmp_path, scripted):
    """Runtime(keep_denials=2): of three calls its guard denied, the resumed conversation replays the newest two."""
    spec = AgentSpec("评审", "", allowed_tools=["Read"], workbench=False)  # no Bash: whitelist_guard denies it
    rules = [Rule(say("resumed"), user="继续"),
             Rule(*(tool("Bash", {"command": f"rm -f {n}.txt", "description": "x"}) for n in "abc"), say("放弃"),
                  prompt="清理")]
    with scripted(rules) as model:
        rt = _runtime(workspace, tmp_path, keep_denials=2)
        first = await rt.run(spec, "清理", step_name="清理")
        denied = [r for r in model.conversation[-1].results if r["is_error"]]
        again = await rt.run(spec, "继续", step_name="清理", resume=first.session_id)
    assert first.ok and again.ok and again.session_id == first.session_id, (first.error, again.error)
    assert len(denied) == 1 and "Bash" in denied[0]["text"], "the guard denied the call"
    resumed = next(x for x in model.conversation if x.user == "继续")
    replayed = [b["input"]["command"] for m in resumed.messages if m["role"] == "assistant"
                for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
    assert replayed == ["rm -f b.txt", "rm -f c.txt"], "keep_denials=2 keeps the newest two denied calls"
    assert rt.store.denials_dropped == 1

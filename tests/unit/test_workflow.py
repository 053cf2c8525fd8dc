"""Workflow semantics: sessions chained across attempts, steps and processes; gates, on_fail, the
clarify/goal helpers, the starter assembly and the read-only wake probe.

Session behaviour runs a real Runtime against the scripted model (the CLI decides what a resume
is); pure ordering logic uses `Recorder`, a Runtime whose `run` never starts the CLI.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from flower.core.agent import AgentSpec
from flower.core.channel import HumanChannel
from flower.core.events import Event
from flower.core.lineage import Lineage
from flower.core.runtime import Runtime, StepResult
from flower.core.workbench import Workbench
from flower.docs import Brief, Goal, Verdict
from flower.testing import Rule, say
from flower.workflow import (BRIEF_KEY, CLARIFY_RESUME, GOAL_KEY, MISSING_KEY, ROUND_KEY, VERDICT_KEY, Ctx, Step,
                             StepAbort, Workflow, clarify_step, goal_step, starter_flow, starter_paths, wake_state,
                             with_goal)
from flower.workflow.goal import ACCEPT, AMEND, DISAGREE

SPEC = AgentSpec("t", "", allowed_tools=["Read"], workbench=False)
BRIEF = "## 目标\n做 X\n## 验收标准\n能跑\n## 边界\n无网络\n## 未知与假设\n无"
GOAL = "## 目标\n做 X\n## 检查清单\n1. x 能跑\n2. 在 macOS 上跑 [此环境无法验证:没有 macOS]"


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-unit-not-real")


class Recorder(Runtime):
    """Never starts the CLI: answers from a list and records how it was called.

    Its sessions ("sess-N", "sess-old", ...) count as stored unless listed in ``dead``.
    """

    def __init__(self, replies: list[tuple[str, bool]] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.replies = list(replies or [])
        self.calls: list[dict[str, Any]] = []
        self.n = 0
        self.dead: set[str] = set()

    def has_session(self, session_id: str) -> bool:
        return session_id.startswith("sess-") and session_id not in self.dead

    async def run(self, spec, prompt, *, step_name=None, resume=None, fork=False, resume_at=None, on_event=None):
        self.n += 1
        sid = resume if resume and not fork else f"sess-{self.n}"
        self.calls.append({"spec": spec.name, "prompt": prompt, "label": step_name, "resume": resume, "fork": fork,
                           "hooked": self.on_session is not None})
        if self.on_session:
            self.on_session(sid)
        text, ok = self.replies.pop(0) if self.replies else ("ok", True)
        r = StepResult(step=step_name or spec.name, session_id=sid, ok=ok, text=text, error=None if ok else "boom")
        self.results.append(r)
        return r


def _lineage(rt: Runtime) -> dict[str, str]:
    return Lineage.open(rt.run_dir, rt.workspace).steps


def _rec(tmp_path: Path, replies: list[tuple[str, bool]] | None = None) -> Recorder:
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    return Recorder(replies, workspace=ws, run_dir=tmp_path / "runs")


# -- Step --------------------------------------------------------------------------------------
def test_step_fields_are_positional_and_checked():
    s = Step("取词", SPEC, "读 seed.txt")
    assert (s.name, s.spec, s.prompt, s.on_fail, s.retries, s.fork) == ("取词", SPEC, "读 seed.txt", "stop", 0, False)
    for bad in ({"on_fail": "warn"}, {"retries": -1}):
        with pytest.raises(ValueError):
            Step("s", SPEC, "p", **bad)
    for name in ("", "_x", "a#b"):
        with pytest.raises(ValueError):
            Step(name, SPEC, "p")


def test_render_uses_the_resume_prompt_only_when_resuming():
    plain = Step("s", SPEC, lambda ctx: f"do {ctx['x']}")
    both = Step("s", SPEC, "full", resume_prompt=lambda ctx: f"carry on {ctx['x']}")
    assert plain.render({"x": 1}) == plain.render({"x": 1}, resuming=True) == "do 1"
    assert both.render({"x": 2}) == "full" and both.render({"x": 2}, resuming=True) == "carry on 2"


def test_attempt_labels():
    plain = Step("s", SPEC, "p")
    judged = Step("s", SPEC, "p", on_reject=lambda r, c: "again")
    assert [plain.label(i) for i in range(3)] == ["s", "s#retry1", "s#retry2"]
    assert [judged.label(i) for i in range(3)] == ["s", "s#round2", "s#round3"]


# -- Workflow: ordering logic (no CLI) ---------------------------------------------------------
DOC_KEYS = {"_runtime", "_on_event", "_sessions", "_results", "_lineage", "_woke", "_aborted", "_failed_at"}


async def test_context_keys_events_and_on_step(tmp_path, creds):
    rt = _rec(tmp_path, [("A out", True), ("B out", True)])
    events: list[Event] = []
    seen: list[str] = []
    ch, wb = HumanChannel(timeout_s=0), Workbench(rt.workspace)
    lent: list[Any] = []
    gate = lambda r, c: lent.append((rt.channel, rt.workbench, ch.on_event)) or True  # noqa: E731
    wf = Workflow([Step("a", SPEC, "pa", gate=gate), Step("b", SPEC, lambda ctx: f"pb<{ctx['a']}>")], name="demo",
                  channel=ch, workbench=wb)
    ctx = await wf.run(rt, on_event=events.append, on_step=lambda s, r: seen.append(f"{s.name}:{r.text}"))
    assert ctx is wf.context and ctx["a"] == "A out" and ctx["b"] == "B out"
    assert rt.calls[1]["prompt"] == "pb<A out>"
    assert {k for k in ctx if k.startswith("_")} <= DOC_KEYS, "only the documented private keys"
    assert ctx["_runtime"] is rt and ctx["_on_event"] == events.append
    assert ctx["_sessions"] == {"a": "sess-1", "b": "sess-2"} and ctx["_results"]["b"].text == "B out"
    assert "_failed_at" not in ctx and "_aborted" not in ctx and ctx["_woke"] == 1, "the first run is wake-up 1"
    assert isinstance(ctx["_lineage"], Lineage) and ctx["_lineage"].steps == {"a": "sess-1", "b": "sess-2"}
    assert seen == ["a:A out", "b:B out"]
    assert [(e.text, e.payload) for e in events if e.kind == "step"] == [
        ("a", {"index": 0, "total": 2, "resumed": False, "woke": 1}),
        ("b", {"index": 1, "total": 2, "resumed": False, "woke": 1})]
    assert lent == [(ch, wb, events.append)], "during the run: channel and workbench lent, channel output wired"
    assert rt.channel is None and rt.workbench is None and ch.on_event is None, "all given back afterwards"


async def test_a_channel_with_its_own_output_is_not_rewired(tmp_path, creds):
    rt = _rec(tmp_path)
    mine: list[Event] = []
    ch = HumanChannel(timeout_s=0, on_event=mine.append)
    seen: list[Any] = []
    await Workflow([Step("a", SPEC, "p", gate=lambda r, c: seen.append(ch.on_event) or True)], channel=ch).run(
        rt, on_event=lambda e: None)
    assert seen == [mine.append] and ch.on_event == mine.append
    # no output given to run(): nothing to wire, the channel keeps None
    ch2 = HumanChannel(timeout_s=0)
    await Workflow([Step("a", SPEC, "p")], channel=ch2).run(_rec(tmp_path / "2"))
    assert ch2.on_event is None


async def test_when_false_skips_the_whole_step(tmp_path, creds):
    rt = _rec(tmp_path)
    events: list[Event] = []

    async def later(ctx: Ctx) -> bool:  # when may be async
        return "a" not in ctx

    flow = Workflow([Step("a", SPEC, "p", when=lambda c: False), Step("b", SPEC, "p", when=later)])
    ctx = await flow.run(rt, on_event=events.append)
    assert "a" not in ctx and "a" not in ctx["_results"] and "a" not in ctx["_sessions"]
    assert [c["label"] for c in rt.calls] == ["b"]
    assert [(e.text, e.payload) for e in events if e.kind == "step"] == [
        ("b", {"index": 1, "total": 2, "resumed": False, "woke": 1})], "a skipped step does not start"


async def test_on_session_is_set_only_around_the_run_and_torn_down_before_the_gate(tmp_path, creds):
    rt = _rec(tmp_path)
    during_gate: list[Any] = []

    def gate(r: StepResult, ctx: Ctx) -> bool:
        during_gate.append(rt.on_session)
        return True

    await Workflow([Step("a", SPEC, "p", gate=gate)]).run(rt)
    assert rt.calls[0]["hooked"] and during_gate == [None] and rt.on_session is None
    assert _lineage(rt) == {"a": "sess-1"}


async def test_on_reject_continues_the_rejected_session_with_fork_forced_off(tmp_path, creds):
    rt = _rec(tmp_path, [("r1", True), ("r2", True), ("r3", True)])
    verdicts = iter([False, False, True])
    async def on_reject(r: StepResult, c: Ctx) -> str:  # on_reject may be async
        return f"fix {r.text}"

    step = Step("w", SPEC, "work", resume_from="a", fork=True, retries=3, gate=lambda r, c: next(verdicts),
                on_reject=on_reject)
    ctx = await Workflow([step], context={"_sessions": {"a": "sess-A"}}).run(rt)
    assert [(c["label"], c["prompt"], c["resume"], c["fork"]) for c in rt.calls] == [
        ("w", "work", "sess-A", True), ("w#round2", "fix r1", "sess-1", False), ("w#round3", "fix r2", "sess-1", False)]
    assert ctx["w"] == "r3" and _lineage(rt) == {"w": "sess-1"}, \
        "the lineage keeps the original name, never a #round label"


async def test_empty_on_reject_or_no_session_starts_over_from_the_same_place(tmp_path, creds):
    rt = _rec(tmp_path)
    calls = {"n": 0}

    def prompt(ctx: Ctx) -> str:
        calls["n"] += 1
        return f"work v{calls['n']}"

    step = Step("w", SPEC, prompt, resume_from="a", retries=2, gate=lambda r, c: False, on_reject=lambda r, c: "",
                on_fail="continue")
    ctx = await Workflow([step], context={"_sessions": {"a": "sess-A"}}).run(rt)
    assert [(c["label"], c["prompt"], c["resume"]) for c in rt.calls] == [
        ("w", "work v1", "sess-A"), ("w#round2", "work v2", "sess-A"), ("w#round3", "work v3", "sess-A")]
    assert ctx["w"] == "ok" and "_failed_at" not in ctx, "continue keeps the last attempt's output"

    class NoSession(Recorder):
        async def run(self, spec, prompt, **kw):
            r = await super().run(spec, prompt, **kw)
            r.session_id = None
            return r

    rt2 = NoSession(workspace=rt.workspace, run_dir=tmp_path / "runs2")
    step2 = Step("w", SPEC, "p", retries=1, gate=lambda r, c: False, on_reject=lambda r, c: "fix it")
    await Workflow([step2]).run(rt2)
    assert [(c["label"], c["prompt"], c["resume"]) for c in rt2.calls] == [("w", "p", None), ("w#round2", "p", None)]


async def test_without_on_reject_retries_are_labelled_retry(tmp_path, creds):
    rt = _rec(tmp_path, [("x", False), ("y", True)])
    ctx = await Workflow([Step("w", SPEC, "p", retries=2)]).run(rt)
    assert [c["label"] for c in rt.calls] == ["w", "w#retry1"] and ctx["w"] == "y"


async def test_async_gate_and_step_abort_stop_at_once(tmp_path, creds):
    rt = _rec(tmp_path)

    async def gate(r: StepResult, ctx: Ctx) -> bool:
        raise StepAbort("没人回答")

    wf = Workflow([Step("w", SPEC, "p", retries=5, gate=gate), Step("after", SPEC, "p")])
    ctx = await wf.run(rt)
    assert len(rt.calls) == 1, "an abort uses none of the remaining retries"
    assert ctx["_aborted"] == "没人回答" and ctx["_failed_at"] == "w" and "w" not in ctx and "after" not in ctx
    assert "w" in ctx["_results"] and ctx["_sessions"]["w"] == "sess-1", "results are written pass or fail"
    wf.steps = [Step("after", SPEC, "p")]
    again = await wf.run(rt)
    assert "_aborted" not in again and "_failed_at" not in again, "a new run starts with neither"


async def test_the_gate_is_called_exactly_once_per_attempt(tmp_path, creds):
    rt = _rec(tmp_path)
    calls: list[str] = []
    ctx = await Workflow([Step("w", SPEC, "p", retries=2, gate=lambda r, c: calls.append(r.step) or False,
                               on_fail="skip")]).run(rt)
    assert calls == ["w", "w#retry1", "w#retry2"] and len(rt.calls) == 3 and "w" not in ctx


async def test_reduce_must_be_sync(tmp_path, creds):
    async def reduce(r: StepResult, c: Ctx) -> str:
        return "never"

    with pytest.raises(TypeError, match="reduce"):
        await Workflow([Step("w", SPEC, "p", reduce=reduce)]).run(_rec(tmp_path))


@pytest.mark.parametrize("on_fail,ran_after,has_output", [("stop", False, False), ("continue", True, True),
                                                           ("skip", True, False)])
async def test_the_three_on_fail_values(tmp_path, creds, on_fail, ran_after, has_output):
    rt = _rec(tmp_path, [("bad", True), ("fine", True)])
    step = Step("w", SPEC, "p", gate=lambda r, c: False, on_fail=on_fail, reduce=lambda r, c: f"reduced {r.text}")
    ctx = await Workflow([step, Step("after", SPEC, "p")]).run(rt)
    assert ("after" in ctx) is ran_after and ("w" in ctx) is has_output and ctx["_results"]["w"].text == "bad"
    assert ctx.get("_failed_at") == ("w" if on_fail == "stop" else None)
    if has_output:
        assert ctx["w"] == "bad", "continue writes result.text, not reduce's output"
    if on_fail == "skip":
        with pytest.raises(KeyError):
            (lambda c: c["w"])(ctx)


async def test_a_failed_run_is_not_gated(tmp_path, creds):
    rt = _rec(tmp_path, [("", False)])
    gated: list[bool] = []
    ctx = await Workflow([Step("w", SPEC, "p", gate=lambda r, c: gated.append(True) or True)]).run(rt)
    assert gated == [] and ctx["_failed_at"] == "w"


async def test_continuity_resume_from_and_reuse_across_workflows(tmp_path, creds):
    rt = _rec(tmp_path)
    a = Step("a", SPEC, "full prompt a", resume_prompt=lambda ctx: "just continue a")
    b = Step("b", SPEC, "full prompt b", resume_from="a", fork=True)
    await Workflow([a, b]).run(rt)
    assert [(c["prompt"], c["resume"], c["fork"]) for c in rt.calls] == [("full prompt a", None, False),
                                                                         ("full prompt b", "sess-1", True)]
    # a new process: both steps reattach to their own sessions; the resume_prompt replaces the prompt
    rt2 = _rec(tmp_path)
    events: list[Event] = []
    ctx = await Workflow([a, b]).run(rt2, on_event=events.append)
    assert [(c["prompt"], c["resume"], c["fork"]) for c in rt2.calls] == [("just continue a", "sess-1", False),
                                                                          ("full prompt b", "sess-2", False)]
    assert ctx["_woke"] == 2 and [e.payload["woke"] for e in events if e.kind == "step"] == [2, 2]
    assert all(e.payload["resumed"] for e in events if e.kind == "step")
    # continuous=False neither reads nor writes the lineage; the Step objects are untouched
    rt3 = _rec(tmp_path)
    ctx3 = await Workflow([a, b], continuous=False).run(rt3)
    assert [(c["prompt"], c["resume"]) for c in rt3.calls] == [("full prompt a", None), ("full prompt b", "sess-1")]
    assert (a.prompt, b.resume_from, b.fork) == ("full prompt a", "a", True)
    assert "_lineage" not in ctx3 and ctx3["_woke"] == 0
    assert _lineage(rt3) == {"a": "sess-1", "b": "sess-2"} and Lineage.open(rt3.run_dir, rt3.workspace).woke == 2
    rt4 = _rec(tmp_path)
    assert (await Workflow([a]).run(rt4))["_woke"] == 3, "the third wake-up"


async def test_only_sessions_the_store_still_has_are_continued(tmp_path, creds):
    rt = _rec(tmp_path)
    lin = Lineage.open(rt.run_dir, rt.workspace)
    lin.remember("a", "sess-gone")
    lin.remember("b", "sess-alive")
    lin.remember("other", "sess-other")
    rt.dead.add("sess-gone")
    seen: list[dict[str, str]] = []
    a = Step("a", SPEC, "full a", resume_prompt="continue a", gate=lambda r, c: seen.append(dict(c["_sessions"])) or True)
    ctx = await Workflow([a, Step("b", SPEC, "full b", resume_prompt="continue b")]).run(rt)
    assert seen[0] == {"b": "sess-alive", "other": "sess-other", "a": "sess-1"}, "live records only, all of them"
    assert [(c["prompt"], c["resume"]) for c in rt.calls] == [("full a", None), ("continue b", "sess-alive")]
    assert ctx["_sessions"]["a"] == "sess-1" and _lineage(rt)["a"] == "sess-1"


async def test_resume_from_a_step_of_an_earlier_process_and_from_nowhere(tmp_path, creds):
    rt = _rec(tmp_path)
    Lineage.open(rt.run_dir, rt.workspace).remember("plan", "sess-old")
    await Workflow([Step("b", SPEC, "p", resume_from="plan")]).run(rt)
    assert [(c["resume"], c["fork"]) for c in rt.calls] == [("sess-old", False)]
    for missing in ("nowhere", "plan"):
        rt2 = _rec(tmp_path / missing)
        if missing == "plan":  # it ran in an earlier process, but the store no longer has that session
            Lineage.open(rt2.run_dir, rt2.workspace).remember("plan", "sess-old")
            rt2.dead.add("sess-old")
        with pytest.raises(ValueError, match="has no session"):
            await Workflow([Step("c", SPEC, "p", resume_from=missing, fork=True)]).run(rt2)
        assert rt2.calls == [] and rt2.channel is None
    rt3 = _rec(tmp_path / "failed")
    with pytest.raises(ValueError, match="'a'"):  # a failed step that produced no session either
        await Workflow([Step("a", SPEC, "p", on_fail="skip", when=lambda c: False),
                        Step("c", SPEC, "p", resume_from="a")]).run(rt3)


# -- Workflow through the real CLI -------------------------------------------------------------
async def test_real_cli_on_reject_continues_the_same_session_and_retries_start_fresh(workspace, tmp_path, creds, scripted):
    rules = [Rule(say("draft 1"), prompt="write a poem", user="write a poem"),
             Rule(say("draft 2"), user="make it rhyme"),
             Rule(say("plain 1"), say("plain 2"), prompt="plain task")]
    async def rhyme(r: StepResult, c: Ctx) -> str:
        return "make it rhyme"

    with scripted(rules) as m:
        rt = Runtime(workspace=workspace, run_dir=tmp_path / "runs")
        judged = Step("poem", SPEC, "write a poem", retries=1, gate=lambda r, c: r.text == "draft 2",
                      on_reject=rhyme)
        plain = Step("plain", SPEC, "plain task", retries=1, gate=lambda r, c: r.text == "plain 2")
        ctx = await Workflow([judged, plain]).run(rt)
    assert ctx["poem"] == "draft 2" and ctx["plain"] == "plain 2"
    poem = [r for r in m.conversation if "write a poem" in r.prompt]
    plain_reqs = [r for r in m.conversation if "plain task" in r.prompt]
    assert len({r.session for r in poem}) == 1 and "write a poem" in json.dumps(poem[-1].messages, ensure_ascii=False)
    assert len({r.session for r in plain_reqs}) == 2, "without on_reject a retry is a fresh session"
    rows = json.loads((tmp_path / "runs" / "manifest.json").read_text())
    assert [r["step"] for r in rows] == ["poem", "poem#round2", "plain", "plain#retry1"]
    assert _lineage(rt) == {"poem": poem[0].session, "plain": plain_reqs[-1].session}


async def test_real_cli_continuity_and_fork(workspace, tmp_path, creds, scripted):
    rules = [Rule(say("A-DONE"), prompt="task A", user="task A"),
             Rule(say("B-DONE"), user="task B"),
             Rule(say("A-AGAIN"), user="carry on A")]
    a = Step("A", SPEC, "task A", resume_prompt="carry on A")
    b = Step("B", SPEC, "task B", resume_from="A", fork=True)
    with scripted(rules) as m:
        await Workflow([a, b]).run(Runtime(workspace=workspace, run_dir=tmp_path / "runs"))
        first_a = m.conversation[0].session
        fork_b = next(r for r in m.conversation if r.user == "task B")
        assert fork_b.session != first_a and "A-DONE" in json.dumps(fork_b.messages), "a fork carries A's history"
        ctx = await Workflow([a]).run(Runtime(workspace=workspace, run_dir=tmp_path / "runs"))
    again = next(r for r in m.conversation if r.user == "carry on A")
    assert again.session == first_a and ctx["A"] == "A-AGAIN" and ctx["_woke"] == 2
    assert "task A" in json.dumps(again.messages), "continuity resumes with the short prompt, not the whole task"


async def test_real_cli_a_lineage_that_outlived_its_store_starts_fresh(workspace, tmp_path, creds, scripted):
    """The lineage names a session the store no longer has: the step starts over instead of failing."""
    rules = [Rule(say("A-DONE"), say("A-DONE 2"), user="task A"), Rule(say("A-AGAIN"), user="carry on A")]
    a = Step("A", SPEC, "task A", resume_prompt="carry on A")
    with scripted(rules) as m:
        await Workflow([a]).run(Runtime(workspace=workspace, run_dir=tmp_path / "runs"))
        first = m.conversation[0].session
        fresh_dir = tmp_path / "runs2"  # same lineage, empty sessions.db
        fresh_dir.mkdir()
        (fresh_dir / "lineage.json").write_bytes((tmp_path / "runs" / "lineage.json").read_bytes())
        rt = Runtime(workspace=workspace, run_dir=fresh_dir)
        assert not rt.has_session(first)
        events: list[Event] = []
        ctx = await Workflow([a]).run(rt, on_event=events.append)
    assert ctx["A"] == "A-DONE 2" and ctx["_results"]["A"].ok and ctx["_sessions"]["A"] != first
    assert len(m.conversation) == 2 and all(r.user.endswith("task A") for r in m.conversation), \
        "the whole task again, not the resume prompt"
    assert m.conversation[1].session != first and "A-DONE" not in json.dumps(m.conversation[1].messages)
    assert [e.payload["resumed"] for e in events if e.kind == "step"] == [False]
    assert _lineage(rt) == {"A": ctx["_sessions"]["A"]}


# -- clarify_step ------------------------------------------------------------------------------
def test_clarify_step_fields_when_gate_reduce(tmp_path):
    path = tmp_path / "notes" / "需求.md"
    ch = HumanChannel(timeout_s=0)
    step = clarify_step(ch, brief_path=path, prompt="诉求:X", retries=2)
    assert (step.name, step.resume_prompt, step.resume_from, step.retries) == ("确认需求", CLARIFY_RESUME, None, 2)
    assert "不要从头再来" in CLARIFY_RESUME and step.render({}, resuming=True) == CLARIFY_RESUME
    assert ch.tool_name in step.spec.allowed_tools and "Write" not in step.spec.allowed_tools
    ctx: Ctx = {}
    assert step.when(ctx) is True and ctx == {}
    half = StepResult("确认需求", text="## 目标\n做 X\n## 验收标准\n能跑")
    assert step.gate(half, ctx) is False and ctx[MISSING_KEY] == ["边界", "未知与假设"] and not path.exists()
    assert "边界、未知与假设" in step.prompt(ctx), "a retry is told what was missing"
    full = StepResult("确认需求", text="好的,需求如下。\n" + BRIEF)
    assert step.gate(full, ctx) is True and MISSING_KEY not in ctx
    assert Brief.load(path) == Brief.parse(BRIEF) and ctx[BRIEF_KEY] == Brief.parse(BRIEF)
    assert step.reduce(full, ctx) == Brief.parse(BRIEF).prompt_block() == ctx["确认需求"]
    assert "好的" not in step.reduce(full, ctx)
    # a complete brief on disk: skipped, but still injected
    later: Ctx = {MISSING_KEY: ["x"]}
    assert step.when(later) is False and later["确认需求"] == ctx["确认需求"] and MISSING_KEY not in later
    assert clarify_step(ch, brief_path=path, prompt="p", always_ask=True).when({}) is True


# -- goal_step ---------------------------------------------------------------------------------
def test_goal_step_freezes_the_goal_and_warns_about_unverifiable_checks(tmp_path):
    path = tmp_path / "目标.md"
    ch = HumanChannel(timeout_s=0)
    step = goal_step(ch, goal_path=path, can_run=True)
    assert step.name == "设定目标" and step.resume_prompt is None and "Bash" in step.spec.allowed_tools
    assert "(没有确认书)" in step.prompt({}), "no brief in the context: the judge is told so"
    assert "做 X" in step.prompt({"确认需求": "## 目标\n做 X"}) and "没有确认书" not in step.prompt({"确认需求": "x"})
    assert goal_step(ch, goal_path=path, brief_key="需求").prompt({"需求": "只看这个"}).endswith("只看这个")
    spec = goal_step(ch, goal_path=path, name="定目标", instructions="多想想").spec
    assert spec.name == "定目标" and "多想想" in spec.instructions and "Bash" not in spec.allowed_tools
    events: list[Event] = []
    ctx: Ctx = {"_on_event": events.append}
    assert step.gate(StepResult("设定目标", text="## 目标\n做 X"), ctx) is False and not path.exists()
    assert step.gate(StepResult("设定目标", text=GOAL), ctx) is True
    assert Goal.load(path).checks == Goal.parse(GOAL).checks and ctx[GOAL_KEY].statement == "做 X"
    assert [(e.kind, e.payload) for e in events] == [
        ("task", {"unverifiable": ["在 macOS 上跑 [此环境无法验证:没有 macOS]"], "total": 2, "path": str(path)})]
    assert "1/2" in events[0].text and "设定目标" in events[0].text
    assert step.reduce(StepResult("设定目标", text="noise"), ctx) == ctx["设定目标"] == Goal.parse(GOAL).prompt_block()
    later: Ctx = {}
    assert step.when(later) is False and later[GOAL_KEY].statement == "做 X"
    assert goal_step(ch, goal_path=path, always_set=True).when({}) is True


# -- with_goal ---------------------------------------------------------------------------------
class Person:
    """An answer source with answers ready (HumanChannel's pluggable side)."""

    def __init__(self, *answers: str) -> None:
        self.answers, self.asked = list(answers), []  # type: list[str], list[tuple[str, Any]]

    async def get(self, question: str, options: list[str] | None, timeout: float | None) -> str | None:
        self.asked.append((question, options))
        return self.answers.pop(0) if self.answers else None

    def inbox(self) -> list[str]:
        return []


def test_with_goal_is_a_replace_that_keeps_everything_else(tmp_path):
    ch = HumanChannel(timeout_s=0)
    base = Step("工作", SPEC, "p", resume_prompt="continue", reduce=lambda r, c: "R", on_fail="continue",
                when=lambda c: True, resume_from="x", fork=True)
    g = with_goal(base, ch, goal_path=tmp_path / "目标.md", rounds=4)
    assert (g.resume_prompt, g.reduce, g.on_fail, g.retries) == ("continue", base.reduce, "continue", 3)
    assert (g.when, g.resume_from, g.fork, g.prompt, g.spec) == (base.when, "x", True, "p", SPEC), \
        "only gate, on_reject and retries change"
    assert g.gate is not None and g.on_reject is not None and base.gate is None
    assert ROUND_KEY == "_goal_rounds" and (GOAL_KEY, VERDICT_KEY, BRIEF_KEY, MISSING_KEY) == (
        "_goal", "_verdict", "_brief", "_brief_missing")
    assert ACCEPT == "接受这个结果,就这样往下走" and AMEND == "修改目标"
    assert with_goal(base, ch, goal_path=tmp_path / "g", rounds=0).retries == 0


async def test_with_goal_without_a_runtime_aborts():
    g = with_goal(Step("w", SPEC, "p"), HumanChannel(timeout_s=0), goal_path="nowhere.md")
    with pytest.raises(StepAbort, match="拿不到 Runtime,无法判定目标"):
        await g.gate(StepResult("w", ok=True, text="done"), {})


async def _judged(tmp_path: Path, verdicts: list[str], person: Person | None, rounds: int = 3,
                  timeout_s: float | None = 5) -> tuple[Ctx, Recorder]:
    """One with_goal step: work replies "work N", the judge replies the given verdicts in turn."""
    Goal.parse(GOAL).write(tmp_path / "目标.md")
    rt = _rec(tmp_path)
    replies = iter(verdicts)
    n = {"work": 0}

    async def run(spec, prompt, **kw):  # the judge's answers are scripted; the work is numbered
        if spec.name.endswith("·判定"):
            return _reply(rt, spec, prompt, next(replies), kw)
        n["work"] += 1
        return _reply(rt, spec, prompt, f"work {n['work']}", kw)

    rt.run = run  # type: ignore[method-assign]
    ch = HumanChannel(timeout_s=timeout_s, answers=person or Person())
    step = with_goal(Step("工作", SPEC, "do it"), ch, goal_path=tmp_path / "目标.md", rounds=rounds)
    return await Workflow([step]).run(rt), rt


def _reply(rt: Recorder, spec: AgentSpec, prompt: str, text: str, kw: dict[str, Any]) -> StepResult:
    rt.calls.append({"spec": spec.name, "prompt": prompt, **kw})
    sid = kw.get("resume") or f"sess-{len(rt.calls)}"
    return StepResult(kw.get("step_name") or spec.name, session_id=sid, ok=True, text=text)


async def test_with_goal_rounds_feedback_and_judge_labels(tmp_path, creds):
    ctx, rt = await _judged(tmp_path, ["## 结论\n未达成\n## 理由\n缺 y", "说不清", "## 结论\n达成"], None)
    labels = [(c["spec"], c.get("step_name"), c.get("resume")) for c in rt.calls]
    assert labels == [("t", "工作", None), ("工作·判定", "工作·判定#1", None), ("t", "工作#round2", "sess-1"),
                      ("工作·判定", "工作·判定#2", None), ("t", "工作#round3", "sess-1"), ("工作·判定", "工作·判定#3", None)]
    assert "缺 y" in rt.calls[2]["prompt"] and "没有给出明确的结论" in rt.calls[4]["prompt"], "ambiguous = not reached"
    assert "第 1 轮工作结束了" in rt.calls[1]["prompt"] and "x 能跑" in rt.calls[1]["prompt"]
    assert "work 1" in rt.calls[1]["prompt"]
    assert ctx["工作"] == "work 3" and ctx[ROUND_KEY] == 3 and ctx[VERDICT_KEY].achieved


async def test_judge_name_and_rounds_restart_at_each_guarded_step(tmp_path, creds):
    Goal.parse(GOAL).write(tmp_path / "目标.md")
    rt = _rec(tmp_path)
    verdicts = iter(["## 结论\n未达成", "## 结论\n达成", "## 结论\n达成"])

    async def run(spec, prompt, **kw):
        return _reply(rt, spec, prompt, next(verdicts) if "轮工作结束了" in prompt else "done", kw)

    rt.run = run  # type: ignore[method-assign]
    ch = HumanChannel(timeout_s=0)
    one = with_goal(Step("一", SPEC, "p1"), ch, goal_path=tmp_path / "目标.md")
    two = with_goal(Step("二", SPEC, "p2"), ch, goal_path=tmp_path / "目标.md", name="裁判")
    ctx = await Workflow([one, two]).run(rt)
    judged = [(c.get("step_name"), c["prompt"][:10]) for c in rt.calls if "轮工作结束了" in c["prompt"]]
    assert judged == [("一·判定#1", "第 1 轮工作结束了"), ("一·判定#2", "第 2 轮工作结束了"),
                      ("裁判#1", "第 1 轮工作结束了")]
    assert ctx[ROUND_KEY] == 1 and "_failed_at" not in ctx


async def test_the_wrapped_gate_runs_first_and_a_false_from_it_skips_the_judge(tmp_path, creds):
    """A deviation from the reference (which replaces the step's gate): the step's own gate is kept, before the
    judge; its False costs no verdict round and its on_reject says what goes back."""
    Goal.parse(GOAL).write(tmp_path / "目标.md")
    rt = _rec(tmp_path)
    replies = iter(["work 1", "work 2", "## 结论\n达成"])
    rt.run = lambda spec, prompt, **kw: _async(_reply(rt, spec, prompt, next(replies), kw))  # type: ignore[method-assign]
    base = Step("工作", SPEC, "do it", gate=lambda r, c: r.text == "work 2", on_reject=lambda r, c: "先跑测试")
    ctx = await Workflow([with_goal(base, HumanChannel(timeout_s=0), goal_path=tmp_path / "目标.md")]).run(rt)
    assert [(c["spec"], c.get("step_name"), c["prompt"][:8]) for c in rt.calls] == [
        ("t", "工作", "do it"), ("t", "工作#round2", "先跑测试"), ("工作·判定", "工作·判定#1", "第 1 轮工作结")]
    assert ctx["工作"] == "work 2" and ctx[ROUND_KEY] == 1 and ctx[VERDICT_KEY].achieved


async def _async(value: Any) -> Any:
    return value


async def test_with_goal_gives_up_after_rounds(tmp_path, creds):
    ctx, rt = await _judged(tmp_path, ["## 结论\n未达成\n## 理由\n缺 y"] * 2, None, rounds=2)
    assert ctx["_failed_at"] == "工作" and len(rt.calls) == 4


UNREACHABLE = "## 结论\n无法验证\n## 理由\n没有 macOS"


@pytest.mark.parametrize("answers,passed,feedback", [
    (["1"], True, None),
    ([ACCEPT], True, None),
    (["2", "只要在 Linux 上跑通就算达成"], False, "在 Linux 上跑通"),
    (["3"], False, "人不同意"),
    (["可以用 docker 验证"], False, "可以用 docker 验证"),
])
async def test_unreachable_puts_three_options_to_the_person(tmp_path, creds, answers, passed, feedback):
    person = Person(*answers)
    verdicts = [UNREACHABLE] + ([] if passed else ["## 结论\n达成"])
    ctx, rt = await _judged(tmp_path, verdicts, person)
    assert person.asked[0][1] == [ACCEPT, AMEND, DISAGREE] and "没有 macOS" in person.asked[0][0]
    assert "_failed_at" not in ctx and ctx["工作"] == ("work 1" if passed else "work 2")
    if feedback:
        assert feedback in rt.calls[2]["prompt"]
    if answers[0] == "2":
        on_disk = Goal.load(tmp_path / "目标.md")
        assert "在 Linux 上跑通" in on_disk.statement and on_disk.checks == Goal.parse(GOAL).checks
        assert ctx[GOAL_KEY].statement == on_disk.statement
        assert "在 Linux 上跑通" in rt.calls[3]["prompt"], "round 2 is judged against the amended goal"


@pytest.mark.parametrize("answers", [[], ["2"]])
async def test_unreachable_and_nobody_answers_aborts(tmp_path, creds, answers):
    ctx, rt = await _judged(tmp_path, [UNREACHABLE], Person(*answers), timeout_s=0 if not answers else 5)
    assert ctx["_failed_at"] == "工作" and len(rt.calls) == 2 and "工作" not in ctx
    assert "没有" in ctx["_aborted"]


# -- starter_flow ------------------------------------------------------------------------------
def test_starter_flow_assembly(workspace, tmp_path):
    wf = starter_flow("帮我做一个 X", workspace=workspace, run_dir=tmp_path / "runs", max_asks=2, timeout_s=7,
                      instructions="只用中文提问")
    assert isinstance(wf, Workflow) and wf.name == "starter" and wf.continuous and wf.context == {}
    assert [s.name for s in wf.steps] == ["确认需求", "设定目标", "工作"]
    ch = wf.channel
    paths = starter_paths(workspace, run_dir=tmp_path / "runs")
    assert (ch.log_path, ch.amend_path, ch.max_asks, ch.timeout_s) == (paths.log, paths.brief, 2, 7.0)
    assert wf.workbench.root == workspace / ".flower" and paths.brief == workspace / ".flower" / "notes" / "需求.md"
    work = wf.steps[2]
    assert work.spec.name == "协调者" and work.spec.delegate_only and set(work.spec.agents) == {"coder"}
    assert "只用中文提问" in wf.steps[0].spec.instructions, "instructions go to the clarifier"
    assert "只用中文提问" not in work.spec.instructions and "只用中文提问" not in wf.steps[1].spec.instructions
    assert ch.tool_name in work.spec.allowed_tools and work.spec.mcp_servers.keys() == {"human"}
    assert wf.steps[0].when is not None and work.when is None
    assert "每改一处就跑一次验证" in work.spec.agents["coder"].prompt and work.retries == 2
    assert not list(tmp_path.rglob("*.md")), "building the flow writes nothing"
    only = starter_flow("x", workspace=workspace, run_dir=tmp_path / "runs", clarify_only=True)
    assert [s.name for s in only.steps] == ["确认需求"]
    no_goal = starter_flow("x", workspace=workspace, run_dir=tmp_path / "runs", goal=False)
    assert [s.name for s in no_goal.steps] == ["确认需求", "工作"] and no_goal.steps[1].gate is None


def test_starter_flow_refuses_before_any_spend(workspace, tmp_path):
    with pytest.raises(ValueError, match="要给一句诉求"):
        starter_flow("  ", workspace=workspace)
    with pytest.raises(ValueError, match="git"):
        starter_flow("x", workspace=workspace, isolate=True)


def test_starter_flow_isolated_workbench_sits_beside_the_repo(git_workspace, tmp_path):
    wf = starter_flow("x", workspace=git_workspace, run_dir=tmp_path / "runs", isolate=True)
    outside = git_workspace.parent / f".flower-{git_workspace.name}"
    assert wf.workbench.root == outside and wf.workbench.external
    assert wf.channel.amend_path == outside / "notes" / "需求.md"
    assert getattr(wf.steps[2].spec.agents["coder"], "_flower_isolate", False)


def test_wake_detection_and_new(workspace, tmp_path):
    runs = tmp_path / "runs"
    paths = starter_paths(workspace, run_dir=runs)
    Brief.parse(BRIEF).write(paths.brief)
    Goal.parse(GOAL).write(paths.goal)
    Lineage.open(runs, workspace).remember("工作", "sess-old")
    wf = starter_flow("", workspace=workspace, run_dir=runs)  # a wake-up needs no sentence
    assert wf.steps[0].when({}) is False and wake_state(workspace, run_dir=runs)["waking"]
    with pytest.raises(ValueError, match="要给一句诉求"):
        starter_flow("", workspace=workspace, run_dir=runs, new=True)
    assert paths.brief.exists(), "a refused start moves nothing"
    fresh = starter_flow("重新来", workspace=workspace, run_dir=runs, new=True)
    assert fresh.steps[0].when({}) is True and fresh.steps[1].when({}) is True
    assert not wake_state(workspace, run_dir=runs)["waking"]
    assert not paths.brief.exists() and not paths.goal.exists() and Lineage.open(runs, workspace).steps == {}
    (archived,) = (runs / "archive").iterdir()
    assert sorted(p.name for p in archived.iterdir()) == ["lineage.json", "目标.md", "需求.md"], "moved, not deleted"


async def test_starter_flow_refuses_a_runtime_with_another_run_dir(workspace, tmp_path, creds):
    wf = starter_flow("x", workspace=workspace, run_dir=tmp_path / "runs")
    rt = _rec(tmp_path)
    rt.run_dir = tmp_path / "elsewhere"
    with pytest.raises(ValueError, match="same run_dir"):
        await wf.run(rt)
    assert rt.calls == [] and not (tmp_path / "elsewhere").exists(), "refused before anything is written"


async def test_wake_sentence_is_appended_once_and_reaches_goal_and_coordinator(workspace, tmp_path, creds):
    paths = starter_paths(workspace, run_dir=tmp_path / "runs")
    Brief.parse(BRIEF).write(paths.brief)
    Goal.parse(GOAL).write(paths.goal)
    for _ in range(2):
        rt = _rec(tmp_path, [("## 目标\n做 X 和 Y\n## 检查清单\n1. y 能跑", True), ("done", True),
                             ("## 结论\n达成", True)])
        ctx = await starter_flow("再加上 Y", workspace=workspace, run_dir=tmp_path / "runs").run(rt)
        assert "确认需求" not in ctx["_results"] and "_failed_at" not in ctx
    assert paths.brief.read_text().count("再加上 Y") == 1
    setter, lead = rt.calls[0], rt.calls[1]
    assert setter["label"] == "设定目标" and "再加上 Y" in setter["prompt"]
    assert "再加上 Y" in lead["prompt"] and "y 能跑" in lead["prompt"] and lead["resume"], \
        "second wake: the coordinator resumes its session with the sentence and the new goal"


# -- wake_state --------------------------------------------------------------------------------
def test_wake_state_reads_only(workspace, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = starter_paths(workspace)
    empty = wake_state(workspace)
    assert empty == {"waking": False, "brief": paths.brief, "goal": paths.goal, "checks": 0, "woke": 0, "steps": {}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"] and list(workspace.iterdir()) == []
    Brief.parse(BRIEF).write(paths.brief)
    Goal.parse(GOAL).write(paths.goal)
    lin = Lineage.open(paths.run_dir, workspace)
    lin.remember("工作", "sess-9")
    lin.bump()
    lin.bump()
    state = wake_state(workspace)
    notes = workspace / ".flower" / "notes"
    assert state == {"waking": True, "brief": notes / "需求.md", "goal": notes / "目标.md", "checks": 2, "woke": 2,
                     "steps": {"工作": "sess-9"}}
    state["steps"]["x"] = "y"
    assert Lineage.open(paths.run_dir, workspace).steps == {"工作": "sess-9"}, "a copy"
    (paths.brief).write_text("## 目标\n只有一节")
    assert wake_state(workspace)["waking"] is False
    iso = wake_state(workspace, isolate=True, brief_name="b.md", goal_name="g.md")
    assert iso["brief"] == tmp_path / ".flower-ws" / "notes" / "b.md" and iso["goal"].name == "g.md"


def test_verdict_feedback_is_what_goes_back(tmp_path):
    """The on_reject of with_goal sends Verdict.feedback(); no verdict → "" (start over)."""
    g = with_goal(Step("w", SPEC, "p"), HumanChannel(timeout_s=0), goal_path=tmp_path / "g.md")
    v = Verdict.parse("## 结论\n未达成\n## 理由\n缺 y")
    assert g.on_reject(StepResult("w", ok=True), {VERDICT_KEY: v}) == v.feedback()
    assert g.on_reject(StepResult("w", ok=True), {}) == ""
    inner = with_goal(replace(Step("w", SPEC, "p"), on_reject=lambda r, c: "inner"), HumanChannel(timeout_s=0),
                      goal_path=tmp_path / "g.md")
    assert inner.on_reject(StepResult("w", ok=True), {}) == "inner"


def test_words_added_during_clarification_survive_the_frozen_brief(tmp_path):
    """The person types while the clarifier is still asking: amend() creates the file first."""
    brief_path = tmp_path / "notes" / "需求.md"
    ch = HumanChannel(amend_path=brief_path, timeout_s=0)
    assert ch.amend("顺便支持深色模式")
    step = clarify_step(ch, brief_path=brief_path, prompt="做一个待办应用")
    reply = "## 目标\n待办应用\n## 验收标准\n能增删\n## 边界\n只做网页\n## 未知与假设\n无"
    ctx: dict = {}
    assert step.gate(StepResult(step="确认需求", ok=True, text=reply), ctx) is True
    frozen = brief_path.read_text(encoding="utf-8")
    assert "顺便支持深色模式" in frozen and Brief.load(brief_path).complete()
    assert Brief.load(brief_path).goal == "待办应用"


# -- RunState: the framework's state, typed, mirrored into the reference's ctx keys --------------
async def test_run_state_is_typed_and_the_ctx_keys_mirror_it(tmp_path, creds):
    from flower.workflow.state import CTX_KEYS, RunState

    rt = _rec(tmp_path, [("A", True), ("B", False)])
    wf = Workflow([Step("a", SPEC, "p"), Step("b", SPEC, "p"), Step("c", SPEC, "p")])
    ctx = await wf.run(rt)
    state = wf.state
    assert isinstance(state, RunState) and state.runtime is rt and state.failed_at == "b"
    assert state.sessions == {"a": "sess-1", "b": "sess-2"} and state.results["b"].text == "B"
    assert ctx["_sessions"] is state.sessions and ctx["_results"] is state.results
    assert ctx["_failed_at"] == "b" and ctx["_woke"] == state.woke == 1 and ctx["_lineage"] is state.lineage
    assert set(CTX_KEYS) == DOC_KEYS
    assert {k for k in ctx if k.startswith("_")} <= set(CTX_KEYS)
    # a second run starts clean: the stop of the first does not leak into it
    rt.replies = [("A", True), ("B", True), ("C", True)]
    ctx = await wf.run(rt)
    assert wf.state is not state and wf.state.failed_at is None and "_failed_at" not in ctx


async def test_a_loan_is_scoped_to_its_run(tmp_path, creds):
    """Two workflows sharing one runtime concurrently never see each other's channel."""
    import asyncio

    rt = _rec(tmp_path)
    seen: dict[str, Any] = {}

    def gate(tag: str):
        async def g(r: StepResult, c: Ctx) -> bool:
            await asyncio.sleep(0.01)
            seen[tag] = rt.channel
            return True
        return g

    one, two = HumanChannel(timeout_s=0), HumanChannel(timeout_s=0)
    await asyncio.gather(
        Workflow([Step("a", SPEC, "p", gate=gate("one"))], channel=one, continuous=False).run(rt),
        Workflow([Step("a", SPEC, "p", gate=gate("two"))], channel=two, continuous=False).run(rt))
    assert seen == {"one": one, "two": two} and rt.channel is None

"""The top-level API: exactly the 62 public names of the reference, and the signatures that bite."""

from __future__ import annotations

import dataclasses
import inspect

import flower

SIXTY_TWO = """Runtime StepResult Step Workflow StepAbort clarify_step goal_step with_goal starter_flow wake_state
BRIEF_KEY MISSING_KEY CLARIFY_RESUME GOAL_KEY VERDICT_KEY ROUND_KEY coordinator worker clarify judge oracle
COORDINATOR_RULES WORKER_RULES CLARIFIER_RULES JUDGE_RULES ORACLE_RULES AgentSpec build_options CompactPolicy
HandoffPolicy default_window Brief Handoff Goal Verdict whitelist_guard delegate_guard spill_guard index_guard
isolate_guard isolated wants_isolation workbench_hooks merge_hooks Workbench SqliteSessionStore
TrimmingSessionStore PruningSessionStore TrimPolicy EphemeralPolicy PrunePolicy is_ephemeral trim_report
Resilience classify endpoint reachable Event normalize Ask HumanChannel Lineage""".split()


def test_all_is_exactly_the_62_names():
    assert len(SIXTY_TWO) == 62
    assert sorted(flower.__all__) == sorted(SIXTY_TWO)
    assert all(hasattr(flower, n) for n in SIXTY_TWO)


def _params(fn) -> list[tuple[str, object, str]]:
    return [(p.name, p.default, p.kind.name) for p in inspect.signature(fn).parameters.values()]


def test_runtime_constructor_is_keyword_only_with_the_seed_defaults():
    params = _params(flower.Runtime.__init__)[1:]
    assert all(kind == "KEYWORD_ONLY" for _, _, kind in params)
    assert [(n, d) for n, d, _ in params] == [
        ("workspace", inspect.Parameter.empty), ("run_dir", "runs"), ("portable", True), ("trim", False),
        ("ephemeral", True), ("keep_denials", 1), ("workbench", False), ("spill_threshold", 4000),
        ("resilience", True), ("handoff", True)]
    assert flower.Runtime.INTERRUPTED == "interrupted-by-human"
    assert flower.Runtime.HANDOFF_DUE == "context-full-handoff"


def test_dataclass_fields_and_chinese_defaults():
    fields = lambda cls: [(f.name, f.default) for f in dataclasses.fields(cls)]  # noqa: E731
    assert [n for n, _ in fields(flower.StepResult)] == [
        "step", "session_id", "ok", "cost_usd", "num_turns", "text", "error", "started_at", "ended_at",
        "attempts", "errors", "resumed", "retired", "context"]
    assert fields(flower.TrimPolicy) == [("keep_recent", 20), ("min_chars", 2000), ("spill_dirname", ".flower/spill"),
                                         ("enabled", True)]
    assert flower.EphemeralPolicy().text == "[{cmd} 的结果已过期(第 {age} 轮前),当前状态可能已变。需要请重新执行]"
    assert inspect.signature(flower.starter_flow).parameters["worker_prompt"].default == \
        "你负责实现。每改一处就跑一次验证,别攒到最后。"
    assert inspect.signature(flower.clarify_step).parameters["name"].default == "确认需求"
    assert inspect.signature(flower.goal_step).parameters["name"].default == "设定目标"
    assert inspect.signature(flower.oracle).parameters["name"].default == "旁路问答"
    assert inspect.signature(flower.whitelist_guard).parameters["role"].default == "这个角色"
    assert [
        inspect.signature(flower.starter_flow).parameters[p].default for p in ("brief_name", "goal_name", "log_name")
    ] == ["需求.md", "目标.md", "问答记录.md"]


def test_where_flower_differs_from_the_reference_the_signatures_say_so():
    """The signature-level rows of README's "Where flower differs from the reference", pinned."""
    from flower.workflow.starter import _Starter

    # isolate_guard: one keyword more than the reference, with a default, so the reference's calls still work
    assert _params(flower.isolate_guard) == [("agents", inspect.Parameter.empty, "POSITIONAL_OR_KEYWORD"),
                                             ("on_inject", None, "KEYWORD_ONLY"), ("foreground", False, "KEYWORD_ONLY")]
    # the stores: the reference's Trimming signature as it is; Pruning's prune= and ephemeral= by keyword only
    assert [(n, k) for n, _, k in _params(flower.TrimmingSessionStore.__init__)[1:]] == [
        ("path", "POSITIONAL_OR_KEYWORD"), ("workspace", "POSITIONAL_OR_KEYWORD"), ("policy", "POSITIONAL_OR_KEYWORD"),
        ("ephemeral", "POSITIONAL_OR_KEYWORD")]
    assert [(n, k) for n, _, k in _params(flower.PruningSessionStore.__init__)[1:]][3:] == [
        ("prune", "KEYWORD_ONLY"), ("ephemeral", "KEYWORD_ONLY")]
    # composed, not inherited: both are the one decorator over SQLite
    from flower.store import ReshapingSessionStore
    assert issubclass(flower.PruningSessionStore, ReshapingSessionStore)
    assert not issubclass(flower.TrimmingSessionStore, flower.SqliteSessionStore)
    # starter_flow: a Workflow, of a subclass that checks the runtime's run_dir first
    assert issubclass(_Starter, flower.Workflow) and _Starter.run is not flower.Workflow.run

"""Role factories: tools, flags and the rule texts that are the model-facing contract."""

from __future__ import annotations

import dataclasses

from claude_agent_sdk import AgentDefinition

from flower.core.agent import AgentSpec, build_options
from flower.core.guard import wants_isolation, whitelist_guard
from flower.core.channel import HumanChannel
from flower.core.roles import (
    CLARIFIER_RULES,
    COORDINATOR_RULES,
    COORDINATOR_TOOLS,
    JUDGE_RULES,
    ORACLE_RULES,
    WEB_TOOLS,
    WORKER_RULES,
    WORKER_TOOLS,
    clarify,
    coordinator,
    judge,
    oracle,
    worker,
)


def Channel() -> HumanChannel:
    """The real channel; nobody answers (timeout_s=0), so an ask never blocks a test."""
    return HumanChannel(timeout_s=0)


def test_tool_constants():
    assert COORDINATOR_TOOLS == ["Agent", "TodoWrite", "Read"]
    assert WEB_TOOLS == ["WebFetch", "WebSearch"]
    assert WORKER_TOOLS == ["Read", "Write", "Edit", "Bash", "Glob", "Grep", "WebFetch", "WebSearch"]


def test_coordinator_fixed_fields_and_tools():
    coder = worker("写代码", "你写代码", tools=["Read", "Write", "Bash"])
    spec = coordinator("协调者", "只做 A", {"coder": coder})
    assert isinstance(spec, AgentSpec)
    assert spec.delegate_only and spec.workbench and spec.glance
    assert spec.agents == {"coder": coder}
    assert spec.allowed_tools == ["Agent", "TodoWrite", "Read", "Bash"]
    assert spec.permission_mode == "acceptEdits"
    assert spec.instructions == f"{COORDINATOR_RULES}\n只做 A".strip()
    assert spec.disallowed_tools == []  # never: it would disable the workers too
    assert coordinator("c", "", {}, glance=False, can_read=False).allowed_tools == ["Agent", "TodoWrite"]


def test_coordinator_merges_workers_web_tools_only():
    spec = coordinator("c", "", {"a": worker("a", "p"), "b": worker("b", "p", tools=["Read", "WebFetch"]),
                                 "all": AgentDefinition("x", "p")}, glance=False)
    assert spec.allowed_tools == ["Agent", "TodoWrite", "Read", "WebFetch", "WebSearch"]
    only_fetch = coordinator("c", "", {"b": worker("b", "p", tools=["WebFetch", "Write"])}, glance=False)
    assert only_fetch.allowed_tools == ["Agent", "TodoWrite", "Read", "WebFetch"]


def test_coordinator_with_channel_and_passthrough():
    ch = Channel()
    spec = coordinator("c", "", {}, channel=ch, model="m", effort="high", max_turns=3, max_budget_usd=1.5,
                       permission_mode="default", hooks={"Stop": []}, env={"A": "1"}, compact=None)
    assert HumanChannel.tool_name in spec.allowed_tools and "Bash" in spec.allowed_tools
    assert spec.mcp_servers.keys() == ch.mcp_servers().keys() == {"human"}
    assert (spec.model, spec.effort, spec.max_turns, spec.max_budget_usd) == ("m", "high", 3, 1.5)
    assert spec.permission_mode == "default" and spec.hooks == {"Stop": []} and spec.env == {"A": "1"}
    options = build_options(spec)
    assert options.mcp_servers["human"]["type"] == "sdk"


def test_coordinator_takes_every_tool_of_a_channel_that_lists_them():
    from flower.core.channel import HumanChannel

    ch = HumanChannel(timeout_s=0)
    spec = coordinator("c", "", {}, channel=ch)
    assert {ch.tool_name, ch.inbox_name} <= set(spec.allowed_tools)
    assert judge("j", ch).allowed_tools[0] == ch.tool_name  # the judge only asks: no inbox
    assert ch.inbox_name not in clarify("q", ch).allowed_tools


def test_coordinator_takes_ask_and_inbox_from_a_channel_that_names_them_separately():
    class Named:  # a channel without `tool_names`: the coordinator falls back to the two names
        tool_name, inbox_name = "mcp__human__ask", "mcp__human__inbox"

        def mcp_servers(self) -> dict:
            return {}

    spec = coordinator("c", "", {}, channel=Named())
    assert spec.allowed_tools[-2:] == ["mcp__human__ask", "mcp__human__inbox"]


def test_worker_definition():
    w = worker("写代码的", "你写代码")
    assert isinstance(w, AgentDefinition)
    assert w.tools == WORKER_TOOLS and w.model == "inherit"
    assert w.prompt == f"你写代码\n\n{WORKER_RULES}"
    assert not wants_isolation(w)
    bare = worker("d", "p", discipline=False, tools=["Read"], effort="low", max_turns=5,
                  permission_mode="acceptEdits", skills=["s"], model="sonnet")
    assert bare.prompt == "p" and bare.tools == ["Read"]
    assert (bare.effort, bare.maxTurns, bare.permissionMode, bare.skills, bare.model) == (
        "low", 5, "acceptEdits", ["s"], "sonnet")
    iso = worker("d", "p", isolate=True)
    assert wants_isolation(iso) and "_flower_isolate" not in dataclasses.asdict(iso)


def test_clarify_has_no_hands():
    ch = Channel()
    spec = clarify("确认需求", ch, instructions="多问边界")
    assert spec.allowed_tools == [HumanChannel.tool_name, "Read", "Glob", "Grep", "WebFetch", "WebSearch"]
    assert spec.mcp_servers.keys() == ch.mcp_servers().keys() == {"human"}
    assert not spec.workbench and not spec.delegate_only and spec.permission_mode == "default"
    assert spec.instructions == f"{CLARIFIER_RULES}\n多问边界"
    assert clarify("c", ch, can_read=False).allowed_tools == [HumanChannel.tool_name]
    assert whitelist_guard(spec.allowed_tools, role=spec.name).matcher == "Bash|Write|Edit|NotebookEdit"


def test_judge_tools_follow_can_run():
    ch = Channel()
    spec = judge("判定", ch)
    assert spec.allowed_tools == [HumanChannel.tool_name, "Read", "Glob", "Grep"]
    assert not spec.workbench and spec.mcp_servers.keys() == ch.mcp_servers().keys() == {"human"}
    assert spec.instructions == JUDGE_RULES.strip()
    runs = judge("判定", ch, can_run=True, max_turns=4)
    assert runs.allowed_tools == [HumanChannel.tool_name, "Read", "Glob", "Grep", "Bash"] and runs.max_turns == 4
    assert whitelist_guard(runs.allowed_tools).matcher == "Write|Edit|NotebookEdit"


def test_oracle_defaults():
    spec = oracle()
    assert spec.name == "旁路问答" and spec.allowed_tools == ["Read", "Glob", "Grep"]
    assert spec.workbench and spec.max_turns == 12 and spec.max_budget_usd == 0.5
    assert spec.instructions == ORACLE_RULES.strip() and spec.mcp_servers == {}


def test_rule_texts_are_the_contract():
    for section in ("## 结论", "## 证据", "## 交付物", "## 未验证"):
        assert section in WORKER_RULES
    assert "30 行" in WORKER_RULES and ".flower/scripts/" in WORKER_RULES
    assert all(w in WORKER_RULES for w in ("文件内容", "命令输出", "日志", "diff", "试错"))
    # deliberately silent on "long products go to artifacts/": the real path comes from the Workbench,
    # through the coordinator's task brief
    assert "artifacts" not in WORKER_RULES
    for section in ("## 目标", "## 验收标准", "## 边界", "## 未知与假设"):
        assert section in CLARIFIER_RULES
    assert "恰好四节" in CLARIFIER_RULES and "超时" in CLARIFIER_RULES and "不设上限" in CLARIFIER_RULES
    assert "未知与假设" in CLARIFIER_RULES and "不写代码" in CLARIFIER_RULES
    for section in ("## 结论", "## 理由", "## 未通过", "## 目标", "## 检查清单"):
        assert section in JUDGE_RULES
    assert "达成 / 未达成 / 无法验证" in JUDGE_RULES and "[此环境无法验证:" in JUDGE_RULES
    assert "先看清楚你在什么环境里" in JUDGE_RULES and "恰好三节" in JUDGE_RULES
    assert all(w in COORDINATOR_RULES for w in ("Agent 工具", "工作台在哪里", "artifacts/", "交回报告",
                                                   "run_in_background 设为 false"))
    assert "只读" in ORACLE_RULES
    assert "inbox" in COORDINATOR_RULES and "每做完一件事" in COORDINATOR_RULES and "岔路口" in COORDINATOR_RULES

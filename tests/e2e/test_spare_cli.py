"""A CLI spawned ahead (Runtime.prespawn) through the real CLI: the first attempt that fits takes it — the hooks
and the in-process MCP server the attempt's own — and one that differs spawns its own CLI, saying why; its warm-up
prompt, blocked or rehearsed and rewound, leaves the step's first request as a fresh CLI's would be."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import HookMatcher, create_sdk_mcp_server
from claude_agent_sdk import tool as sdk_tool

from flower.core.agent import AgentSpec
from flower.core.events import Event
from flower.core.runtime import Runtime
from flower.core.spare import WARM_UP
from flower.testing import Rule, say, tool

pytestmark = pytest.mark.cli


def _spec(label: str, seen: list[str], instructions: str = "") -> AgentSpec:
    """A step whose hook and MCP tool say which spec built them (the spare's or the attempt's)."""

    async def hook(data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        seen.append(f"hook:{label}")
        return {}

    @sdk_tool("which", "says who answers", {})
    async def which(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(f"mcp:{label}")
        return {"content": [{"type": "text", "text": f"answered by {label}"}]}

    return AgentSpec("工人", instructions, allowed_tools=["mcp__probe__which"], workbench=False,
                     mcp_servers={"probe": create_sdk_mcp_server("probe", tools=[which])},
                     hooks={"PreToolUse": [HookMatcher(matcher=None, hooks=[hook])]})


async def test_a_prespawned_cli_takes_the_step_with_the_steps_own_callbacks(
        workspace: Path, tmp_path: Path, scripted: Any) -> None:
    events: list[Event] = []
    seen: list[str] = []
    rules = [Rule(tool("mcp__probe__which", {}), prompt="who answers?"),
             Rule(say("done"), result="answered by")]
    with scripted(rules) as model:
        rt = Runtime(workspace=workspace, run_dir=tmp_path / "runs")
        await rt.prespawn(_spec("spare", seen))
        assert model.conversation == [], "the waiting CLI sent nothing"
        r = await asyncio.wait_for(rt.run(_spec("attempt", seen), "who answers?", on_event=events.append), 90)
    assert r.ok and r.text == "done", r.error
    taken = [e.payload for e in events if e.payload.get("subtype") == "prespawn"]
    assert taken == [{"subtype": "prespawn", "taken": True, "why": None}], taken
    main = [x for x in model.conversation if not x.side]
    assert seen == ["hook:attempt", "mcp:attempt"], seen  # the spare's own callbacks never ran
    assert "answered by attempt" in main[-1].results[0]["text"]


async def test_a_step_that_differs_from_the_prespawned_cli_spawns_its_own_and_says_why(
        workspace: Path, tmp_path: Path, scripted: Any) -> None:
    events: list[Event] = []
    seen: list[str] = []
    with scripted([Rule(say("fresh"), prompt="go")]) as model:
        rt = Runtime(workspace=workspace, run_dir=tmp_path / "runs")
        await rt.prespawn(_spec("spare", seen, instructions="one way"))
        r = await asyncio.wait_for(rt.run(_spec("attempt", seen, instructions="another"), "go",
                                          on_event=events.append), 90)
    assert r.ok and r.text == "fresh", r.error
    why = [e.payload for e in events if e.payload.get("subtype") == "prespawn"]
    assert [w["taken"] for w in why] == [False] and "system_prompt" in why[0]["why"], why
    assert len({x.session for x in model.conversation if not x.side}) == 1


@pytest.mark.parametrize("expected", ["the run's own", "another"])
async def test_a_prespawned_cli_is_taken_only_when_the_run_has_the_base_url_it_was_spawned_for(
        workspace: Path, tmp_path: Path, scripted: Any, monkeypatch: pytest.MonkeyPatch, expected: str) -> None:
    """A warm sandbox spawns its CLI for the bridge to the gateway; a run whose environment names another base URL
    (the model itself) must not inherit the guess: its CLI is respawned, and says why, and reaches its model."""
    events: list[Event] = []
    seen: list[str] = []
    with scripted([Rule(say("reached"), prompt="go")]) as model:
        url = model.url
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)  # the run's environment: straight at the model
        guess = url if expected == "the run's own" else "http://127.0.0.1:9"  # the bridge, say
        rt = Runtime(workspace=workspace, run_dir=tmp_path / "runs")
        await rt.prespawn(_spec("spare", seen), env={"ANTHROPIC_BASE_URL": guess})
        r = await asyncio.wait_for(rt.run(_spec("attempt", seen), "go", on_event=events.append), 90)
    assert r.ok and r.text == "reached", r.error
    why = [e.payload for e in events if e.payload.get("subtype") == "prespawn"]
    if expected == "the run's own":
        assert why == [{"subtype": "prespawn", "taken": True, "why": None}], why
    else:
        assert [w["taken"] for w in why] == [False] and "environment differs: ANTHROPIC_BASE_URL" in why[0]["why"], why
        assert url not in why[0]["why"]  # names, never values


@pytest.mark.parametrize("rehearse", [False, True], ids=["blocked", "rehearsed"])
async def test_the_spares_warm_up_prompt_leaves_the_first_request_as_it_would_be(
        workspace: Path, tmp_path: Path, scripted: Any, rehearse: bool) -> None:
    """A spawned spare is sent ``WARM_UP`` (its CLI's slow first prompt, paid while it waits): blocked by a hook
    before the model, or — where its base URL answers it (a warm sandbox's bridge; here the scripted model) —
    rehearsed the whole way and rewound. Either way the step's first request is the one a CLI spawned for it
    sends, and a resumed session holds no trace of the warm-up."""
    seen: list[str] = []
    uuid = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
    firsts = []
    rules = [Rule(say("done"), prompt="go"), Rule(say("again"), user="more"), Rule(say("done"), prompt="go")]
    with scripted(rules) as model:
        for ahead in (True, False):
            rt = Runtime(workspace=workspace, run_dir=tmp_path / f"runs-{ahead}")
            if ahead:
                await rt.prespawn(_spec("spare", seen), rehearse=rehearse)
                reached = [WARM_UP in x.user for x in model.requests]
                assert reached == ([True] if rehearse else []), "the warm-up went as far as it should"
            r = await asyncio.wait_for(rt.run(_spec("attempt", seen), "go"), 90)
            assert r.ok and r.text == "done", r.error
            firsts.append([x for x in model.conversation if not x.side][-1])
            if ahead:
                again = await asyncio.wait_for(rt.run(_spec("attempt", seen), "more", resume=r.session_id), 90)
                assert again.ok and again.text == "again", again.error
    assert sum(WARM_UP in json.dumps(x.body, ensure_ascii=False) for x in model.requests) == int(rehearse)
    warm, fresh = (uuid.sub("<id>", json.dumps(x.body["messages"], ensure_ascii=False)) for x in firsts)
    assert warm == fresh

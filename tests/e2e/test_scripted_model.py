"""The scripted model drives the real bundled CLI: tools, settings isolation, faults."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from claude_agent_sdk import AssistantMessage, ResultMessage, query
from claude_agent_sdk._errors import ResultError

from flower.core.agent import AgentSpec, build_options
from flower.testing import Rule, ScriptedModel, drop, fail, say, tool, too_long

pytestmark = pytest.mark.cli


async def _run(model: ScriptedModel, prompt: str, options) -> tuple[list, Exception | None]:
    msgs: list = []
    try:
        async for m in query(prompt=prompt, options=model.apply(options)):
            msgs.append(m)
    except Exception as e:  # the SDK raises on an error result; tests inspect both
        return msgs, e
    return msgs, None


async def test_write_tool_call_lands_on_disk_and_is_recorded(workspace: Path):
    target = workspace / "hello.txt"
    rules = [Rule(tool("Write", {"file_path": str(target), "content": "hi there\n"}), prompt="make hello"),
             Rule(say("wrote it"), result="hello.txt")]
    spec = AgentSpec("t", "", allowed_tools=["Read", "Write"], permission_mode="acceptEdits")
    with ScriptedModel(rules) as model:
        msgs, err = await _run(model, "make hello.txt", build_options(spec, cwd=workspace))
    assert err is None
    assert target.read_text() == "hi there\n"
    assert isinstance(msgs[-1], ResultMessage) and msgs[-1].result == "wrote it"
    first, second = model.conversation
    assert first.session and first.session == second.session == msgs[-1].session_id
    assert "Write" in first.tools and first.size > 10_000 and "make hello.txt" in first.prompt
    assert second.results and not second.results[0]["is_error"] and model.unmatched == []


async def test_host_settings_and_claude_md_never_reach_the_model(workspace: Path, tmp_path: Path, monkeypatch):
    """setting_sources=[]: user and project hooks and CLAUDE.md are ignored.

    portable=False reads project settings only (["project"]): the same probe then sees the
    project's marker and hook, which proves the probe can fail.
    """
    home = tmp_path / "home"
    ran = {"user": tmp_path / "user-hook-ran", "project": tmp_path / "project-hook-ran"}

    def hook(marker: Path) -> str:
        return json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": f"touch {marker}"}]}]}})

    (workspace / "CLAUDE.md").write_text("PROJECT-MARKER-7731: always answer in French.\n")
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.json").write_text(hook(ran["project"]))
    monkeypatch.setenv("HOME", str(home))
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(hook(ran["user"]))
    (home / ".claude" / "CLAUDE.md").write_text("USER-MARKER-5519\n")

    for portable in (True, False):
        with ScriptedModel([Rule(say("ok"), prompt="hi", repeat=True)], config_dir=home / ".claude") as model:
            _, err = await _run(model, "hi", build_options(AgentSpec("t", ""), cwd=workspace, portable=portable))
        assert err is None
        seen = "\n".join(r.system + "\n" + json.dumps(r.messages) for r in model.conversation)
        assert "USER-MARKER-5519" not in seen and not ran["user"].exists()
        if portable:
            assert "PROJECT-MARKER-7731" not in seen
            assert not ran["project"].exists(), "a project hook ran although setting_sources=[]"
        else:
            assert "PROJECT-MARKER-7731" in seen and ran["project"].exists()


@pytest.mark.parametrize("fault,status,cli_attempts,text", [
    (fail(529), 529, 2, "529"),
    (fail(500), 500, 2, "500"),
    (fail(429), 429, 2, "429"),
    (fail(401), 401, 2, "API key"),
    (too_long(250_000, 200_000), 400, 1, "Prompt is too long"),
    (drop(), 200, 2, "Connection dropped"),
])
async def test_each_fault_reaches_the_cli_as_the_api_would_send_it(workspace, fault, status, cli_attempts, text):
    """CLAUDE_CODE_MAX_RETRIES=1 (the model's env): the CLI itself tries retryable faults twice."""
    with ScriptedModel([Rule(fault, prompt="go", repeat=True)]) as model:
        msgs, err = await _run(model, "go", build_options(AgentSpec("t", ""), cwd=workspace))
    assert isinstance(err, ResultError) and text.lower() in str(err).lower()
    assert len(model.conversation) == cli_attempts
    assert all(r.status == status for r in model.conversation)
    synthetic = [m for m in msgs if isinstance(m, AssistantMessage)]
    assert synthetic and synthetic[-1].error  # the CLI marks its own error message


async def test_a_529_then_success_is_absorbed_by_the_cli_retry(workspace):
    with ScriptedModel([Rule(fail(529), say("recovered"), prompt="go")]) as model:
        msgs, err = await _run(model, "go", build_options(AgentSpec("t", ""), cwd=workspace))
    assert err is None and msgs[-1].result == "recovered"
    assert [r.status for r in model.conversation] == [529, 200]
    assert any(getattr(m, "subtype", "") == "api_retry" for m in msgs)


async def test_usage_is_settable_per_answer(workspace):
    with ScriptedModel([Rule(say("big", usage={"input_tokens": 180_000}), prompt="go")]) as model:
        msgs, _ = await _run(model, "go", build_options(AgentSpec("t", ""), cwd=workspace))
    assistant = [m for m in msgs if isinstance(m, AssistantMessage)][-1]
    assert assistant.usage["input_tokens"] == 180_000


async def test_subagent_requests_are_told_apart(workspace):
    rules = [
        Rule(tool("Agent", {"description": "probe", "prompt": "SUBTASK say hi", "subagent_type": "general-purpose",
                            "run_in_background": False}), prompt="dispatch", agent=False),
        Rule(say("hi from the subagent"), prompt="SUBTASK", agent=True),
        Rule(say("all done"), result="hi from the subagent", agent=False),
    ]
    spec = AgentSpec("t", "", allowed_tools=["Agent"])
    with ScriptedModel(rules) as model:
        msgs, err = await _run(model, "dispatch a subagent", build_options(spec, cwd=workspace))
    assert err is None and msgs[-1].result == "all done"
    sub = [r for r in model.conversation if r.is_subagent]
    assert sub and all(r.agent for r in sub) and "cc_is_subagent=true" in sub[0].system
    assert model.unmatched == []


def test_non_streaming_and_count_tokens_over_plain_http():
    with ScriptedModel([Rule(tool("Read", {"file_path": "/x"}, text="reading"), user="q")]) as model:
        def post(path: str, body: dict) -> tuple[int, dict]:
            req = urllib.request.Request(model.url + path, json.dumps(body).encode(),
                                         {"content-type": "application/json"})
            with urllib.request.urlopen(req) as resp:
                return resp.status, json.loads(resp.read())
        status, msg = post("/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "q"}],
                                            "tools": [{"name": "Read"}]})
        assert status == 200 and msg["stop_reason"] == "tool_use"
        assert [b["type"] for b in msg["content"]] == ["text", "tool_use"] and msg["content"][1]["input"] == {"file_path": "/x"}
        status, counted = post("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "x" * 400}]})
        assert status == 200 and counted["input_tokens"] > 50
        status, msg = post("/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "unscripted"}],
                                            "tools": [{"name": "Read"}]})
        assert msg["content"][0]["text"] == model.fallback and len(model.unmatched) == 1
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(model.url + "/v1/other", b"{}"))
        assert e.value.code == 404

"""build_options and the policies: pure mapping logic."""

from __future__ import annotations

import pytest

from flower.core.agent import PLUGIN_DIR, AgentSpec, CompactPolicy, HandoffPolicy, build_options, default_window


def test_spec_defaults_match_the_seed():
    s = AgentSpec("n", "i")
    assert s.allowed_tools == ["Read", "Glob", "Grep"] and s.permission_mode == "default"
    assert s.workbench is True and s.delegate_only is False and s.glance is False and s.env == {}


def test_build_options_appends_never_replaces_the_system_prompt(tmp_path):
    o = build_options(AgentSpec("n", "domain rules"), cwd=tmp_path, prelude="workbench index")
    assert o.system_prompt == {"type": "preset", "preset": "claude_code", "append": "domain rules\n\nworkbench index"}
    assert o.setting_sources == [] and o.cwd == tmp_path
    assert build_options(AgentSpec("n", "")).system_prompt == {"type": "preset", "preset": "claude_code"}


def test_portable_false_reads_only_project_settings():
    assert build_options(AgentSpec("n", ""), portable=False).setting_sources == ["project"]


def test_session_store_and_flush_only_with_a_store(tmp_path):
    from flower.store import SqliteSessionStore

    assert build_options(AgentSpec("n", "")).session_store is None
    store = SqliteSessionStore(tmp_path / "s.db")
    o = build_options(AgentSpec("n", ""), session_store=store, flush="batched")
    assert o.session_store is store and o.session_store_flush == "batched"


def test_plugin_only_when_the_dir_exists(monkeypatch, tmp_path):
    assert PLUGIN_DIR.is_dir()
    assert build_options(AgentSpec("n", "")).plugins == [{"type": "local", "path": str(PLUGIN_DIR)}]
    assert build_options(AgentSpec("n", ""), use_plugin=False).plugins == []
    monkeypatch.setattr("flower.core.agent.PLUGIN_DIR", tmp_path / "gone")
    assert build_options(AgentSpec("n", "")).plugins == []


def test_resume_fork_and_at_pass_through():
    o = build_options(AgentSpec("n", ""), resume="s1", fork=True, resume_at="u1", add_dirs=["/x"])
    assert (o.resume, o.fork_session, o.resume_session_at, o.add_dirs) == ("s1", True, "u1", ["/x"])


def test_fork_and_resume_at_without_resume_do_nothing():
    o = build_options(AgentSpec("n", ""), fork=True, resume_at="u1")
    assert (o.resume, o.fork_session, o.resume_session_at) == (None, False, None)


def test_compact_policy_env():
    assert build_options(AgentSpec("n", "", env={"X": "1"})).env == {"X": "1"}
    spec = AgentSpec("n", "", compact=CompactPolicy("no_summary"), env={"X": "1", "DISABLE_AUTO_COMPACT": "0"})
    assert build_options(spec).env == {"X": "1", "DISABLE_AUTO_COMPACT": "1"}  # compact wins over spec.env
    assert CompactPolicy().env() == {}
    assert CompactPolicy("off").env() == {"DISABLE_COMPACT": "1"}
    assert CompactPolicy(window=120_000).env() == {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "120000"}
    with pytest.raises(ValueError, match="no_summary"):
        CompactPolicy("sometimes").env()


def test_handoff_thresholds():
    h = HandoffPolicy(window=200_000)
    assert (h.at, h.warn_at) == (150_000, 130_000)
    tiny = HandoffPolicy(window=30_000)
    assert (tiny.at, tiny.warn_at) == (10_000, 1_000)


@pytest.mark.parametrize("env,window", [
    ({}, 1_000_000),
    ({"ANTHROPIC_MODEL": "claude-opus-4-6[1m]"}, 1_000_000),
    ({"ANTHROPIC_MODEL": "claude-haiku-4-5-1m"}, 1_000_000),
    ({"ANTHROPIC_MODEL": "claude-haiku-21m"}, 200_000),  # "21m" is not the word 1m
    ({"ANTHROPIC_MODEL": "claude-3-5-haiku-latest"}, 200_000),
    ({"ANTHROPIC_DEFAULT_OPUS_MODEL": "claude-haiku-4-5"}, 200_000),
    ({"ANTHROPIC_MODEL": "some-proxy-model"}, 1_000_000),
])
def test_default_window_errs_large(monkeypatch, env, window):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert default_window() == window
    assert HandoffPolicy().window == window

"""Agent definition: what a specialised agent is, and how it compiles to SDK options."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from claude_agent_sdk import AgentDefinition, ClaudeAgentOptions, HookMatcher, McpServerConfig
from claude_agent_sdk.types import EffortLevel, HookEvent, PermissionMode, SessionStore, SystemPromptPreset

from .errors import ConfigError

# The plugin that travels with the repo; after a wheel install it may not exist.
PLUGIN_DIR = Path(__file__).resolve().parents[2] / "plugin"
# Claude Code's builtin AGENTS.md/CLAUDE.md loader: with no setting sources (portable) it reads nothing ("project
# memory is off") yet costs ~45 ms of every first prompt, on the path to the first model request.
PORTABLE_SETTINGS = {"enabledPlugins": {"cc-plugin-agents-md@builtin": False}}


def default_window() -> int:
    """Guess the context window from the model name, optimistically.

    Guessing too large is not fatal: the API answers "prompt is too long", the
    runtime recognises it and hands off at once (a degraded handoff). Guessing
    too small wastes every session early, so unknown names get the large window.
    """
    name = (os.environ.get("ANTHROPIC_MODEL") or os.environ.get("ANTHROPIC_DEFAULT_OPUS_MODEL") or "").lower()
    if re.search(r"(?:^|[^a-z0-9])1m(?:[^a-z0-9]|$)", name):
        return 1_000_000
    if "haiku" in name:
        return 200_000
    return 1_000_000


CompactMode = Literal["auto", "no_summary", "off"]

@dataclass
class CompactPolicy:
    """Switches the CLI's own auto-compact; the algorithm itself lives in the CLI.

    mode: "auto" sets nothing (the CLI compacts at window - 33k); "no_summary" turns
    auto-compact off (DISABLE_AUTO_COMPACT=1: flower hands off instead); "off" turns
    compaction off entirely, /compact included (DISABLE_COMPACT=1). `window` moves the
    CLI's threshold (CLAUDE_CODE_AUTO_COMPACT_WINDOW; the CLI clamps it to 100k-1M).
    """

    mode: CompactMode = "auto"
    window: int | None = None

    def env(self) -> dict[str, str]:
        modes = {"auto": {}, "no_summary": {"DISABLE_AUTO_COMPACT": "1"}, "off": {"DISABLE_COMPACT": "1"}}
        if self.mode not in modes:
            raise ConfigError(f"CompactPolicy.mode must be one of {sorted(modes)}, not {self.mode!r}",
                              setting="CompactPolicy.mode")
        env = dict(modes[self.mode])
        if self.window is not None:
            env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(self.window)
        return env


@dataclass
class HandoffPolicy:
    """Write a handoff document and start a fresh session instead of compacting."""

    enabled: bool = True
    window: int = field(default_factory=default_window)
    headroom: int = 50_000
    max_generations: int = 8

    @property
    def at(self) -> int:
        return max(10_000, self.window - self.headroom)

    @property
    def warn_at(self) -> int:
        return max(1_000, self.at - 20_000)


@dataclass
class AgentSpec:
    name: str
    instructions: str
    allowed_tools: list[str] = field(default_factory=lambda: ["Read", "Glob", "Grep"])
    disallowed_tools: list[str] = field(default_factory=list)
    model: str | None = None
    effort: EffortLevel | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    permission_mode: PermissionMode = "default"
    agents: dict[str, AgentDefinition] | None = None
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    hooks: dict[HookEvent, list[HookMatcher]] | None = None
    compact: CompactPolicy | None = None
    env: dict[str, str] = field(default_factory=dict)
    glance: bool = False
    workbench: bool = True
    delegate_only: bool = False


def build_options(
    spec: AgentSpec,
    *,
    cwd: str | Path | None = None,
    session_store: SessionStore | None = None,
    resume: str | None = None,
    fork: bool = False,
    resume_at: str | None = None,
    use_plugin: bool = True,
    portable: bool = True,
    add_dirs: list[str] | None = None,
    flush: Literal["batched", "eager"] = "eager",
    prelude: str = "",
) -> ClaudeAgentOptions:
    """Compile a spec to SDK options.

    The prompt is appended to Claude Code's own system prompt, never replaces it, so
    specialisation costs no general ability. `portable` reads no host settings.
    `fork` and `resume_at` only mean something with `resume`; without it they do nothing.
    """
    append = "\n\n".join(part for part in (spec.instructions.strip(), prelude.strip()) if part)
    system_prompt: SystemPromptPreset = {"type": "preset", "preset": "claude_code"}
    if append:
        system_prompt["append"] = append
    env = dict(spec.env)
    if spec.compact is not None:
        env.update(spec.compact.env())
    kw: dict[str, Any] = {}
    for key, value in (("model", spec.model), ("effort", spec.effort), ("max_turns", spec.max_turns),
                       ("max_budget_usd", spec.max_budget_usd), ("agents", spec.agents),
                       ("mcp_servers", spec.mcp_servers), ("hooks", spec.hooks), ("cwd", cwd),
                       ("add_dirs", add_dirs)):
        if value:
            kw[key] = value
    if session_store is not None:
        kw["session_store"], kw["session_store_flush"] = session_store, flush
    if resume:
        kw["resume"], kw["fork_session"] = resume, fork
        if resume_at:
            kw["resume_session_at"] = resume_at
    if use_plugin and PLUGIN_DIR.is_dir():
        kw["plugins"] = [{"type": "local", "path": str(PLUGIN_DIR)}]
    return ClaudeAgentOptions(
        system_prompt=system_prompt,
        allowed_tools=list(spec.allowed_tools),
        disallowed_tools=list(spec.disallowed_tools),
        permission_mode=spec.permission_mode,
        setting_sources=[] if portable else ["project"],
        settings=json.dumps(PORTABLE_SETTINGS) if portable else None,
        env=env,
        **kw,
    )

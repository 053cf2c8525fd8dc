"""Agent definition: what a specialised agent is, and how it compiles to SDK options."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk.types import SessionStore

# The plugin that travels with the repo; after a wheel install it may not exist.
PLUGIN_DIR = Path(__file__).resolve().parents[2] / "plugin"


def default_window() -> int:
    """Guess the context window from the model name, optimistically.

    Guessing too large is not fatal: the API answers "prompt is too long", the
    runtime recognises it and hands off at once (a degraded handoff). Guessing
    too small wastes every session early, so unknown names get the large window.
    """
    name = (os.environ.get("ANTHROPIC_MODEL") or os.environ.get("ANTHROPIC_DEFAULT_OPUS_MODEL") or "").lower()
    if re.search(r"\[1m\]|-1m\b|1m-context", name):
        return 1_000_000
    if re.search(r"haiku|claude-(2|3|instant)", name):
        return 200_000
    return 1_000_000


@dataclass
class CompactPolicy:
    """Switches the CLI's own auto-compact; the algorithm itself lives in the CLI.

    mode: "auto" leaves the CLI's default; "off" disables auto-compact (flower hands
    off instead); "window" makes the CLI compact as if the window were `window` tokens.
    """

    mode: str = "auto"
    window: int | None = None

    def env(self) -> dict[str, str]:
        if self.mode == "off":
            return {"DISABLE_AUTO_COMPACT": "1"}
        if self.mode == "window":
            if not self.window:
                raise ValueError("CompactPolicy(mode='window') needs window=<tokens>")
            return {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(self.window)}
        if self.mode == "auto":
            return {}
        raise ValueError(f"CompactPolicy.mode must be 'auto', 'off' or 'window', not {self.mode!r}")


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
    effort: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    permission_mode: str = "default"
    agents: dict[str, Any] | None = None
    mcp_servers: dict[str, Any] = field(default_factory=dict)
    hooks: dict[str, Any] | None = None
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
    flush: str = "eager",
    prelude: str = "",
) -> ClaudeAgentOptions:
    """Compile a spec to SDK options.

    The prompt is appended to Claude Code's own system prompt, never replaces it, so
    specialisation costs no general ability. `portable` reads no host settings.
    With no CompactPolicy, auto-compact is off: flower hands off instead.
    """
    append = "\n\n".join(part for part in (prelude.strip(), spec.instructions.strip()) if part)
    system_prompt: dict[str, Any] = {"type": "preset", "preset": "claude_code"}
    if append:
        system_prompt["append"] = append
    compact = spec.compact or CompactPolicy(mode="off")
    plugins = [{"type": "local", "path": str(PLUGIN_DIR)}] if use_plugin and PLUGIN_DIR.is_dir() else []
    return ClaudeAgentOptions(
        system_prompt=system_prompt,
        allowed_tools=list(spec.allowed_tools),
        disallowed_tools=list(spec.disallowed_tools),
        model=spec.model,
        effort=spec.effort,  # type: ignore[arg-type]
        max_turns=spec.max_turns,
        max_budget_usd=spec.max_budget_usd,
        permission_mode=spec.permission_mode,  # type: ignore[arg-type]
        agents=dict(spec.agents) if spec.agents else None,
        mcp_servers=dict(spec.mcp_servers),
        hooks=spec.hooks,  # type: ignore[arg-type]
        env={**compact.env(), **spec.env},
        setting_sources=[] if portable else None,
        plugins=plugins,  # type: ignore[arg-type]
        cwd=cwd,
        session_store=session_store,
        session_store_flush=flush,  # type: ignore[arg-type]
        resume=resume,
        fork_session=fork,
        resume_session_at=resume_at,
        add_dirs=list(add_dirs or []),
    )

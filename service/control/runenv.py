"""A run's environment, from its tenant's credentials file: names on an allow-list, and nothing else.

The credentials file holds the tenant's key and whatever else an operator keeps beside it. A deny-list of
secret-looking names (KEY, TOKEN, SECRET…) let ``DB_PASSWD``, ``GITHUB_PAT`` and ``NPM_AUTH`` through to every run;
so a run gets only what the bundled CLI and flower read to choose models and behave — model names and the switches
Claude Code's documentation names — plus its own gateway token and where the gateway is. The tenant's key, custom
headers and upstream URL stay with the gateway (``service.gateway.upstream_of``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ["ALLOWED", "run_environment", "settings_of", "left_out"]

MODELS = ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
          "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL")
SWITCHES = (
    # limits and timeouts
    "MAX_THINKING_TOKENS", "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "CLAUDE_CODE_MAX_RETRIES", "API_TIMEOUT_MS",
    "BASH_DEFAULT_TIMEOUT_MS", "BASH_MAX_TIMEOUT_MS", "BASH_MAX_OUTPUT_LENGTH", "MAX_MCP_OUTPUT_TOKENS",
    "MCP_TIMEOUT", "MCP_TOOL_TIMEOUT", "CLAUDE_BASH_MAINTAIN_PROJECT_WORKING_DIR",
    # compaction (flower's CompactPolicy reads these too)
    "DISABLE_AUTO_COMPACT", "CLAUDE_CODE_AUTO_COMPACT_WINDOW", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE",
    # caching
    "DISABLE_PROMPT_CACHING", "DISABLE_PROMPT_CACHING_HAIKU", "DISABLE_PROMPT_CACHING_SONNET",
    "DISABLE_PROMPT_CACHING_OPUS",
    # quiet: no traffic but the model's
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING",
    "DISABLE_AUTOUPDATER", "DISABLE_BUG_COMMAND", "DISABLE_COST_WARNINGS", "DISABLE_NON_ESSENTIAL_MODEL_CALLS",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE", "USE_BUILTIN_RIPGREP",
    # flower's own
    "FLOWER_LANG",
)
ALLOWED: frozenset[str] = frozenset(MODELS + SWITCHES)


def run_environment(values: Mapping[str, str], token: str, *, url: str | None = None,
                    socket_path: Path | None = None) -> dict[str, str]:
    """The run's env file: the allowed settings of the tenant's, the run's token, and where the gateway is."""
    out = {k: v for k, v in values.items() if k in ALLOWED}
    out["ANTHROPIC_API_KEY"] = token
    if socket_path is not None:
        out["FLOWER_GATEWAY_SOCKET"] = str(socket_path)
    if url:
        out["ANTHROPIC_BASE_URL"] = url
    return out


def settings_of(values: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The allowed settings of the tenant's file, sorted: what a warm sandbox's CLI is started with (pool.Shape)."""
    return tuple(sorted((k, v) for k, v in values.items() if k in ALLOWED))


def left_out(values: Mapping[str, str]) -> list[str]:
    """The names of the tenant's file that no run gets (names only: an operator's hint, never a value)."""
    from ..gateway import SECRET_KEYS

    return sorted(k for k in values if k not in ALLOWED and k not in SECRET_KEYS)

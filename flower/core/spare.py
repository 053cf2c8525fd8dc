"""Spare: a CLI spawned for a step before the step — or the run — exists, taken by the first attempt it fits.

The CLI's start (0.4 s and more: its own runtime, its tools, its settings, its MCP servers) is most of what a run
waits for before its first model request, and nothing of it depends on the prompt. So a warm sandbox
(``sandbox/entrypoint.py``) spawns the first step's CLI from options built ahead (``Runtime.prespawn``), and the
step's first attempt takes it when what the CLI was spawned with is what the attempt would spawn now.

What is compared is what the CLI was given at spawn: every option — the hooks by their shape (events, matchers,
timeouts, how many), the MCP servers by their config, the session store by identity — and its environment as the
SDK makes it (the process's, then ``options.env``; ``environment``) at spawn against the attempt's now — the base
URL, so the gateway or the model it talks to, among them — less ``LATE``: names the CLI reads later or another way
(the key — a warm sandbox's CLI is spawned with a stand-in for it, ``sandbox/bridge.py``; flower's own marks).
Anything else that differs is a ``misfit``: the spare is closed and the attempt spawns its own CLI (a measured
fallback: one CLI start).
What a run's environment is only expected to hold (a warm sandbox's bridge as its base URL) goes in the spare's
``options.env``, never in the process's: a guess must not become the run's environment.

Spawned, the CLI is sent one prompt of its own (``WARM_UP``): the CLI's first prompt is twice as slow to reach
the model as its next (its code's first run, its per-session listings), and that cost is better paid while the
CLI waits. How far it goes depends on who would answer it:
- ``rehearse=False`` (a model that bills): a hook of the spare's blocks it before it reaches the model. Nothing
  is sent; the transcript keeps one informational line saying a prompt was blocked. Half the cost is paid.
- ``rehearse=True`` (its base URL answers requests itself until the spare is taken — a warm sandbox's bridge,
  ``sandbox/bridge.py``): it goes the whole way, and is then rewound out of the conversation (the CLI's
  ``rewind_conversation`` control request, to the prompt's own uuid), so the first request of the real prompt
  is the same, byte for byte, as a fresh CLI's. All of it is paid.

Taken, the Python side is the step's own: the hook callbacks the CLI was given forward to the attempt's, the
stderr line callback too, and the in-process MCP servers' tool handlers are replaced by the attempt's (through
the MCP server's public ``add_request_handler``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import fields, replace
from typing import Any

from claude_agent_sdk import (ClaudeAgentOptions, ClaudeSDKClient, HookContext, HookInput, HookJSONOutput, HookMatcher,
                              ResultMessage)

__all__ = ["Spare", "LATE", "WARM_UP", "shape_of", "environment"]

LATE = frozenset({"ANTHROPIC_API_KEY", "PWD", "OLDPWD", "CLAUDECODE"})  # and every FLOWER_* name (flower's marks)
_MCP_METHODS = ("tools/list", "tools/call")
WARM_UP = "flower: a warm-up prompt, blocked before the model or rewound after it"


async def _block_warm_up(data: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
    if data["hook_event_name"] == "UserPromptSubmit" and data["prompt"] == WARM_UP:
        return {"decision": "block", "reason": "warm-up"}
    return {}


async def _one_prompt(text: str, mark: str) -> AsyncIterator[dict[str, object]]:
    yield {"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": None, "uuid": mark}


class _Hook:
    """A hook callback the CLI was given at spawn: calls the taking attempt's own (nothing before)."""

    def __init__(self) -> None:
        self.target: Callable[..., Any] | None = None

    async def __call__(self, data: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        if self.target is None:
            return {}
        out: HookJSONOutput = await self.target(data, tool_use_id, context)
        return out


class _Lines:
    """The stderr callback the CLI was given at spawn: the taking attempt's own."""

    def __init__(self) -> None:
        self.target: Callable[[str], None] | None = None

    def __call__(self, line: str) -> None:
        if self.target is not None:
            self.target(line)


def _hook_shape(hooks: Any) -> object:
    if not hooks:
        return None
    return {event: [(m.matcher, m.timeout, len(m.hooks)) for m in matchers] for event, matchers in hooks.items()}


def _servers(servers: Any) -> object:
    if not isinstance(servers, dict):
        return servers
    return {name: {k: v for k, v in config.items() if k != "instance"} for name, config in servers.items()}


def shape_of(options: ClaudeAgentOptions) -> dict[str, object]:
    """What a CLI spawned with ``options`` is given, as comparable values (callbacks by their shape)."""
    out: dict[str, object] = {}
    for f in fields(options):
        value = getattr(options, f.name)
        if f.name == "hooks":
            value = _hook_shape(value)
        elif f.name == "mcp_servers":
            value = _servers(value)
        elif f.name in ("stderr", "can_use_tool"):
            value = value is not None
        elif f.name == "session_store":
            value = id(value) if value is not None else None
        elif f.name == "env":
            continue  # compared as part of the CLI's whole environment (``environment``)
        out[f.name] = value
    return out


def environment(options: ClaudeAgentOptions) -> dict[str, str]:
    """The environment a CLI spawned now with ``options`` gets (the process's, ``options.env`` over it, as the
    SDK merges them), less what it reads late (``LATE``, FLOWER_*)."""
    merged = {**os.environ, **options.env}
    return {k: v for k, v in merged.items() if k not in LATE and not k.startswith("FLOWER_")}


def _sdk_servers(options: ClaudeAgentOptions) -> dict[str, Any]:
    servers: dict[str, Any] = options.mcp_servers if isinstance(options.mcp_servers, dict) else {}
    return {name: c["instance"] for name, c in servers.items() if isinstance(c, dict) and c.get("type") == "sdk"}


class Spare:
    """The CLI of ``options``, spawned by ``start`` and handed to the first attempt that ``fits``."""

    def __init__(self, options: ClaudeAgentOptions, *, rehearse: bool = False) -> None:
        if options.can_use_tool is not None:
            raise ValueError("a spare CLI cannot forward can_use_tool: build its options without one")
        self._shape = shape_of(options)
        self._hooks: dict[str, list[list[_Hook]]] = {}
        forwarding: dict[str, list[HookMatcher]] = {}
        for event, matchers in (options.hooks or {}).items():
            rows = [[_Hook() for _ in m.hooks] for m in matchers]
            self._hooks[event] = rows
            forwarding[event] = [replace(m, hooks=list(row)) for m, row in zip(matchers, rows)]
        self.rehearse = rehearse
        if not rehearse:
            forwarding.setdefault("UserPromptSubmit", []).append(HookMatcher(matcher=None, hooks=[_block_warm_up]))
        self._lines = _Lines()
        self.options = replace(options, hooks=forwarding, stderr=self._lines)  # type: ignore[arg-type]
        self._environ: dict[str, str] = {}
        self.client = ClaudeSDKClient(self.options)

    async def start(self) -> None:
        """Spawn the CLI, finish the SDK's handshake with it (its hooks and servers registered) and warm it up."""
        self._environ = environment(self.options)  # what it inherits, taken as it is spawned
        await self.client.connect()
        if not self.rehearse:
            await self.client.query(WARM_UP)
            async for _ in self.client.receive_response():
                pass
            return
        mark = str(uuid.uuid4())
        await self.client.query(_one_prompt(WARM_UP, mark))
        async for msg in self.client.receive_response():
            if isinstance(msg, ResultMessage) and msg.is_error:
                raise RuntimeError(f"the rehearsal failed: {msg.result or msg.subtype}")
        # The SDK has no method for this control request; the CLI's answer says whether it was done.
        answer = await self.client._query._send_control_request(  # type: ignore[union-attr]
            {"subtype": "rewind_conversation", "target_message_uuid": mark})
        if not (answer or {}).get("rewound"):
            raise RuntimeError(f"the CLI did not rewind its rehearsal: {answer}")

    def misfit(self, options: ClaudeAgentOptions) -> str | None:
        """Why an attempt with ``options`` cannot take this CLI — everything that differs, the environment's by
        name only (its values may be secrets) — or None when it fits."""
        theirs = shape_of(options)
        why = [f"option {name} differs" for name, value in self._shape.items()
               if name != "stderr" and theirs.get(name) != value]
        now = environment(options)
        changed = sorted(k for k in now.keys() | self._environ.keys() if now.get(k) != self._environ.get(k))
        if changed:
            more = f" and {len(changed) - 6} more" if len(changed) > 6 else ""
            why.append(f"environment differs: {', '.join(changed[:6])}{more}")
        if why:
            return "; ".join(why)
        for server in _sdk_servers(options).values():
            if not hasattr(server, "get_request_handler"):
                return "an in-process MCP server cannot be re-bound (this mcp has no get_request_handler)"
        return None

    def take(self, options: ClaudeAgentOptions) -> ClaudeSDKClient:
        """The connected client, its callbacks now ``options``' own (``misfit(options)`` must be None)."""
        for event, matchers in (options.hooks or {}).items():
            for row, matcher in zip(self._hooks[event], matchers):
                for hook, callback in zip(row, matcher.hooks):
                    hook.target = callback
        self._lines.target = options.stderr
        mine = _sdk_servers(self.options)
        for name, server in _sdk_servers(options).items():
            for method in _MCP_METHODS:
                entry = server.get_request_handler(method)
                if entry is not None:
                    mine[name].add_request_handler(method, entry.params_type, entry.handler)
        return self.client

    async def close(self) -> None:
        await self.client.disconnect()

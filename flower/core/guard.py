"""The hook layer: what the roles may not do is enforced here, not asked for in a prompt.

A prompt is a suggestion; a PreToolUse deny is a wall. Every guard is a factory
returning an SDK `HookMatcher`. All hooks matching one tool call run concurrently
in the CLI, so no guard relies on another's order, and every guard answers `{}`
when it has no opinion. Denials, spills and isolation injections are emitted as
audit events (`flower.core.audit`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from claude_agent_sdk import AgentDefinition, HookMatcher
from claude_agent_sdk.types import (
    HookCallback,
    HookContext,
    HookEvent,
    HookInput,
    HookJSONOutput,
    PostToolUseHookInput,
    PreToolUseHookInput,
    SyncHookJSONOutput,
)

from flower.core.audit import emit
from flower.core.files import spill_file
from flower.core.workbench import Workbench
from flower.core.shell import is_ephemeral

__all__ = [
    "whitelist_guard",
    "delegate_guard",
    "spill_guard",
    "index_guard",
    "isolate_guard",
    "isolated",
    "wants_isolation",
    "workbench_hooks",
    "merge_hooks",
]

HANDS_ON = "Bash|Write|Edit|NotebookEdit"
WRITE_ONLY = "Write|Edit|NotebookEdit"
BULKY = "Bash|Read|Grep|Glob|WebFetch|WebSearch"

_log = structlog.get_logger("flower.guard")

ISOLATE_ATTR = "_flower_isolate"
SPILL_HEAD = 400

ToolHookInput = PreToolUseHookInput | PostToolUseHookInput
PreHook = Callable[[PreToolUseHookInput], SyncHookJSONOutput]
PostHook = Callable[[PostToolUseHookInput], SyncHookJSONOutput]


def _is_main_thread(data: ToolHookInput) -> bool:
    """Tool hooks of a subagent carry `agent_id`; the main thread's never do."""
    return not data.get("agent_id")


def _who(data: ToolHookInput) -> dict[str, Any]:
    return {"session_id": data.get("session_id"), "agent_id": data.get("agent_id") or None}


def _deny(reason: str) -> SyncHookJSONOutput:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


def _allow(updated: dict[str, Any]) -> SyncHookJSONOutput:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                   "updatedInput": updated}}


def _on_pre(fn: PreHook) -> HookCallback:
    """The SDK's callback shape around a PreToolUse guard; any other event gets no opinion."""
    async def hook(data: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        return fn(data) if data["hook_event_name"] == "PreToolUse" else {}
    return hook


def _on_post(fn: PostHook) -> HookCallback:
    """The SDK's callback shape around a PostToolUse guard; any other event gets no opinion."""
    async def hook(data: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        return fn(data) if data["hook_event_name"] == "PostToolUse" else {}
    return hook


def _matcher(pattern: str, hook: HookCallback, *, wall: bool = False) -> HookMatcher:
    """A wall fails closed: if its callback ever breaks, the CLI blocks the call."""
    return HookMatcher(matcher=pattern, hooks=[hook], on_failure="block" if wall else None)


def _resolve(path: str, cwd: str | None) -> str:
    p = os.path.expanduser(path)
    if not os.path.isabs(p) and cwd:
        p = os.path.join(cwd, p)
    return os.path.normpath(p)


class _Root:
    """A folder that paths are tested against, its real path found once (hooks run on every tool call)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._real: str | None = None

    def holds(self, path: str) -> bool:
        """Is ``path``, symlinks followed, the folder or inside it?"""
        try:
            if self._real is None:
                self._real = os.path.realpath(self.root)
            real = os.path.realpath(path)
        except (OSError, ValueError):
            return False
        return real == self._real or real.startswith(self._real.rstrip(os.sep) + os.sep)


# ---------------------------------------------------------------------------
# Walls
# ---------------------------------------------------------------------------

_FOUR = ("Bash", "Write", "Edit", "NotebookEdit")


def _granted(tool: str, allowed: list[str]) -> bool:
    return any(a == tool or a.startswith(tool + "(") for a in allowed)


def whitelist_guard(allowed: list[str] | None, *, role: str = "这个角色") -> HookMatcher | None:
    """Make `allowed_tools` exclusive for the four hands-on tools, main thread only.

    `allowed_tools` only pre-approves; a role without Write can still call it.
    Returns None when nothing is banned. `allowed=None` grants none of the four.
    """
    banned = [t for t in _FOUR if not _granted(t, list(allowed or []))]
    if not banned:
        return None

    def guard(data: PreToolUseHookInput) -> SyncHookJSONOutput:
        if not _is_main_thread(data):
            return {}
        tool = data.get("tool_name", "")
        reason = (f"{role}没有 {tool}。这是有意的设计,不是配置遗漏。"
                  "把结论写进你回复的正文,框架会从那里取走——不要换别的工具或写法绕过。")
        emit("deny", guard="whitelist", role=role, tool=tool, reason=reason, **_who(data))
        return _deny(reason)

    return _matcher("|".join(banned), _on_pre(guard), wall=True)


def delegate_guard(*, tools: str = HANDS_ON, allow_glance: bool = False) -> HookMatcher:
    """The coordinator does not do the work: its hands-on calls are denied with the way forward.

    Subagents always pass. With `allow_glance`, a main-thread Bash passes iff
    `is_ephemeral(command)` — the same test that expires those results on resume.
    """

    def guard(data: PreToolUseHookInput) -> SyncHookJSONOutput:
        if not _is_main_thread(data):
            return {}
        tool = data.get("tool_name", "")
        command = str((data.get("tool_input") or {}).get("command") or "")
        if allow_glance and tool == "Bash" and is_ephemeral(command):
            return {}
        reason = (f"协调者不亲自动手,{tool} 留给子代理。下一步:用 Agent 工具派一个子代理去做,"
                  "在任务书里写清目标和验收标准,并要求它把长产物写进工作台的 artifacts/ "
                  "(默认 .flower/artifacts/,以系统提示里给出的工作台路径为准),回复里只给路径和结论。")
        if allow_glance and tool == "Bash":
            reason += "你自己只能跑只读的一瞥命令(如 ls、git status、git log -1),不能改动、重定向或后台运行。"
        emit("deny", guard="delegate", role="coordinator", tool=tool, reason=reason,
             command=command or None, **_who(data))
        return _deny(reason)

    return _matcher(tools, _on_pre(guard), wall=True)


# ---------------------------------------------------------------------------
# Workbench: spill and index
# ---------------------------------------------------------------------------


def _reads_spill(data: ToolHookInput, spill: _Root, shown: str) -> bool:
    """Reading a spill file must come back whole, or "Read it" would loop forever."""
    inp = data.get("tool_input") or {}
    cwd = data.get("cwd")
    tool = data.get("tool_name")
    if tool == "Read" and inp.get("file_path"):
        return spill.holds(_resolve(str(inp["file_path"]), cwd))
    if tool in ("Grep", "Glob") and inp.get("path"):
        return spill.holds(_resolve(str(inp["path"]), cwd))
    if tool == "Bash":
        command = str(inp.get("command") or "")
        return str(spill.root) in command or shown in command
    return False


def _binary(response: dict[str, Any]) -> bool:
    """Images and documents travel as long base64 strings: spilling them would break them."""
    return bool(response.get("isImage")) or response.get("type", "text") != "text"


def spill_guard(
    workbench: Workbench,
    *,
    threshold: int = 4000,
    tools: str = BULKY,
    main_only: bool = False,
) -> HookMatcher:
    """Spill over-long tool results to disk at once, leaving a pointer and the first 400 chars.

    Only over-long string fields of the output dict (nested dicts included) are
    replaced, so the tool's output shape survives; lists are never touched (they
    may hold image blocks). Anything that is not a dict is left alone.
    """
    spill_dir = workbench.root / "spill"
    spill_root, spill_shown = _Root(spill_dir), workbench.show(spill_dir)

    def trim(value: dict[str, Any], spilled: list[tuple[str, int]]) -> dict[str, Any] | None:
        out: dict[str, Any] | None = None
        for key, v in value.items():
            new: Any = None
            if isinstance(v, str) and len(v) > threshold:
                path = str(spill_file(spill_dir, v))
                spilled.append((path, len(v)))
                new = (f"[输出共 {len(v)} 字,已落盘到 {workbench.show(Path(path))};以下是前 {SPILL_HEAD} 字,"
                       f"需要全文请用 Read 读这个文件]\n{v[:SPILL_HEAD]}")
            elif isinstance(v, dict):
                new = trim(v, spilled)
            if new is not None:
                if out is None:
                    out = dict(value)
                out[key] = new
        return out

    def guard(data: PostToolUseHookInput) -> SyncHookJSONOutput:
        if main_only and not _is_main_thread(data):
            return {}
        response = data.get("tool_response")
        if (not isinstance(response, dict) or _binary(response)
                or _reads_spill(data, spill_root, spill_shown)):
            return {}
        spilled: list[tuple[str, int]] = []
        try:
            trimmed = trim(response, spilled)
        except OSError as exc:  # a full disk must not lose the result: keep it in context
            emit("spill_failed", tool=data.get("tool_name"), reason=str(exc), **_who(data))
            return {}
        if trimmed is None:
            return {}
        for path, size in spilled:
            emit("spill", role=data.get("agent_type") or "main", tool=data.get("tool_name"),
                 path=path, size=size, **_who(data))
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedToolOutput": trimmed}}

    return _matcher(tools, _on_post(guard))


def index_guard(workbench: Workbench) -> HookMatcher:
    """A write into the workbench refreshes INDEX.md, so the next agent knows it exists."""
    root = _Root(workbench.root)

    def guard(data: PostToolUseHookInput) -> SyncHookJSONOutput:
        path = (data.get("tool_input") or {}).get("file_path")
        if path and root.holds(_resolve(str(path), data.get("cwd"))):
            workbench.refresh()
        return {}

    return _matcher("Write|Edit", _on_post(guard))


# ---------------------------------------------------------------------------
# Isolation: a property of the role, injected into the Agent call
# ---------------------------------------------------------------------------


def isolated(agent: AgentDefinition, flag: bool = True) -> AgentDefinition:
    """Mark a subagent role as needing its own git worktree; returns the same object.

    A Python-side attribute, not a dataclass field: the SDK serialises with
    `asdict()`, so the mark never reaches the CLI. `dataclasses.replace()` drops it.
    """
    object.__setattr__(agent, ISOLATE_ATTR, bool(flag))
    return agent


def wants_isolation(agent: AgentDefinition | None) -> bool:
    return agent is not None and bool(getattr(agent, ISOLATE_ATTR, False))


class _Ledger:
    """Which (session, role) got isolation injected, and from which checkout.

    Shared by `isolate_guard` and `isolation_check` so that a CLI ignoring the
    injection is caught instead of silently running the role in the shared checkout.
    """

    def __init__(self, size: int = 4096) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._size = size

    def record(self, session: str, role: str, cwd: str) -> None:
        with self._lock:
            self._items[(session, role)] = cwd
            self._items.move_to_end((session, role))
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def checkout(self, session: str, role: str) -> str | None:
        with self._lock:
            return self._items.get((session, role))


_LEDGER = _Ledger()


def _will_isolate(inp: dict[str, Any], agents: dict[str, AgentDefinition] | None) -> bool:
    """Exactly `isolate_guard`'s condition, so the two rewriters never both fire."""
    return ("cwd" not in inp and "isolation" not in inp
            and wants_isolation((agents or {}).get(str(inp.get("subagent_type") or ""))))


def isolate_guard(agents: dict[str, AgentDefinition], *, on_inject: Callable[[str, str | None], object] | None = None,
                  foreground: bool = False) -> HookMatcher:
    """Give roles marked `isolated()` their own worktree by injecting `isolation: "worktree"`.

    Only when the call sets neither `cwd` nor `isolation` (they are exclusive; a
    model's own `cwd` is respected). The answer is `allow` with `updatedInput`.
    `on_inject(subagent_type, description)` is told of each injection; its failure
    never cancels the injection (it is logged).

    `foreground=True` (what `workbench_hooks` passes for a coordinator) also sets
    `run_in_background: false` on a main-thread call in the same rewrite: two hooks
    rewriting one call do not merge in the CLI, so `foreground_guard` leaves the calls
    this guard rewrites to it. The bundled CLI honours this `updatedInput` on an Agent
    call, `isolation` and `run_in_background` alike (shown through the real CLI in
    tests/e2e/test_hooks_cli.py); `isolation_check()` still denies loudly if a CLI drops it.
    """

    def guard(data: PreToolUseHookInput) -> SyncHookJSONOutput:
        inp = data.get("tool_input") or {}
        role = str(inp.get("subagent_type") or "")
        if data.get("tool_name") != "Agent" or not _will_isolate(inp, agents):
            return {}
        if data.get("session_id") and data.get("cwd"):
            _LEDGER.record(str(data["session_id"]), role, str(data["cwd"]))
        emit("isolate", role=role, tool="Agent", description=inp.get("description"), **_who(data))
        if on_inject is not None:
            try:
                on_inject(role, inp.get("description"))
            except Exception as exc:  # noqa: BLE001 - a callback must not cancel the isolation
                _log.warning("isolate_guard.on_inject_failed", role=role, error=repr(exc))
        updated = {**inp, "isolation": "worktree"}
        if foreground and _is_main_thread(data):
            updated["run_in_background"] = False
        return _allow(updated)

    return _matcher("Agent", _on_pre(guard), wall=True)


def isolation_check(*, tools: str = HANDS_ON) -> HookMatcher:
    """Fail loudly if an isolated role ended up in the shared checkout anyway.

    After `isolate_guard` injected a worktree, the role's subagent must not run in
    the checkout it was dispatched from. If it does (a CLI that ignored the
    rewrite), its hands-on calls are denied and a "deny" event names the cause.
    """

    def guard(data: PreToolUseHookInput) -> SyncHookJSONOutput:
        if _is_main_thread(data) or not data.get("session_id"):
            return {}
        role = str(data.get("agent_type") or "")
        checkout = _LEDGER.checkout(str(data["session_id"]), role)
        if checkout is None or os.path.normpath(str(data.get("cwd") or "")) != os.path.normpath(checkout):
            return {}
        reason = (f"隔离失败:角色 {role} 应在独立的 git worktree 里运行,但它正运行在共享检出 {checkout}。"
                  "Claude Code 忽略了注入的 isolation=worktree,为避免改动共享检出,此调用被拒绝。"
                  "停止动手,在回复里报告这个隔离失败。")
        emit("deny", guard="isolation", role=role, tool=data.get("tool_name"), reason=reason, **_who(data))
        return _deny(reason)

    return _matcher(tools, _on_pre(guard), wall=True)


def foreground_guard(agents: dict[str, AgentDefinition] | None = None) -> HookMatcher:
    """The coordinator's dispatches run in the foreground, so a step never ends with work in flight.

    The CLI runs an Agent call in the background unless told `run_in_background:
    false`; the main thread then answers at once and the step ends while workers
    still run. Several foreground calls in one turn still run in parallel.
    Rewritten silently. A call to an isolated role (`agents`) is left to
    `isolate_guard(foreground=True)`, which puts it in the foreground in its own
    rewrite: two rewrites of one call do not merge in the CLI (one is lost).
    """

    def guard(data: PreToolUseHookInput) -> SyncHookJSONOutput:
        inp = data.get("tool_input") or {}
        if not _is_main_thread(data) or inp.get("run_in_background") is False or _will_isolate(inp, agents):
            return {}
        return _allow({**inp, "run_in_background": False})

    return _matcher("Agent", _on_pre(guard), wall=True)


# ---------------------------------------------------------------------------
# Assembly
# ---------------------------------------------------------------------------


def workbench_hooks(
    workbench: Workbench,
    *,
    delegate_only: bool = True,
    spill_threshold: int | None = 4000,
    agents: dict[str, AgentDefinition] | None = None,
    allow_glance: bool = False,
) -> dict[HookEvent, list[HookMatcher]]:
    """Every hook a workbench needs, by event; events with nothing to install are left out.

    Beyond the seed's list: `delegate_only` also brings `foreground_guard()` (the
    coordinator waits for its workers), and a role marked `isolated()` brings
    `isolation_check()` along with `isolate_guard()`, so an ignored injection fails loudly.
    """
    pre: list[HookMatcher] = []
    post: list[HookMatcher] = [index_guard(workbench)]
    if delegate_only:
        pre += [delegate_guard(allow_glance=allow_glance), foreground_guard(agents)]
    if agents and any(wants_isolation(a) for a in agents.values()):
        pre += [isolate_guard(agents, foreground=delegate_only), isolation_check()]
    if spill_threshold:
        post.append(spill_guard(workbench, threshold=spill_threshold))
    hooks: dict[HookEvent, list[HookMatcher]] = {"PreToolUse": pre, "PostToolUse": post}
    return {event: matchers for event, matchers in hooks.items() if matchers}


def merge_hooks(*groups: Mapping[HookEvent, list[HookMatcher]] | None) -> dict[HookEvent, list[HookMatcher]]:
    """Concatenate hook configs by event (no de-duplication: twice given, twice installed)."""
    merged: dict[HookEvent, list[HookMatcher]] = {}
    for group in groups:
        for event, matchers in (group or {}).items():
            merged.setdefault(event, []).extend(matchers)
    return merged

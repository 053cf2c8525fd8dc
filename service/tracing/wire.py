"""The data plane's spans: what the gateway saw on the wire (``service.gateway.forward`` calls these).

A model call's span carries its model and its usage and cost as the upstream reported them (the gateway's metering,
the same figures the run's row sums). Its parent is the attempt its request names (``X-Claude-Code-Session-Id``) or,
for a subagent's request (``x-claude-code-agent-id``), that subagent's span. A tool call's span opens when the answer
that asks for it was read and closes when its result comes back in a later request (denied or spilled as the wire
audit reads it); only calls the wire saw are spanned, so a forged result closes nothing. A subagent's span runs from
its first model call to its last, under the latest ``Agent`` call of its run, and is sent when its run's grant
closes, with the tool calls still open then (``flower.tool.unfinished``).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .export import Attribute, Exporter, Span, span_id_of

if TYPE_CHECKING:
    from ..gateway.grant import Grant
    from ..gateway.wire import ToolResult, Usage

__all__ = ["WireSpans", "MAX_OPEN_TOOLS", "MAX_AGENTS", "AGENT_TOOLS", "NAME_MAX"]

MAX_OPEN_TOOLS = 16_384  # tool calls awaiting their result, all runs together; the oldest is sent unfinished
MAX_AGENTS = 256  # subagents spanned per run; past it a subagent's calls sit under its session's attempt
AGENT_TOOLS = frozenset({"Agent", "Task"})  # the tool that starts a subagent (its older name: Task)
NAME_MAX = 200  # what of a run-chosen header or name a span keeps


def new_span_id() -> int:
    return secrets.randbits(64) or 1


def attempt_parent(run_id: str, session: str) -> int:
    """The span a main-thread model call sits under: its session's attempt (``runs.RunSpans`` derives the same id),
    else the run's."""
    return span_id_of("attempt", run_id, session) if session else span_id_of("run", run_id)


@dataclass
class _Open:
    tenant: str
    tool: str
    start: float
    parent: int
    span_id: int


@dataclass
class _Agent:
    span_id: int
    parent: int
    start: float
    end: float
    calls: int = 0


class WireSpans:
    def __init__(self, exporter: Exporter, *, now: Callable[[], float] = time.time) -> None:
        self.exporter, self.now = exporter, now
        self._tools: OrderedDict[tuple[str, str], _Open] = OrderedDict()
        self._agents: dict[str, dict[str, _Agent]] = {}
        self._launched: dict[str, int] = {}  # run → the span of its latest Agent call

    def model_call(self, grant: Grant, *, session: str, agent: str, model: str, request_model: str, usage: Usage,
                   status: int, start: float, end: float, calls: Sequence[tuple[str, str]]) -> None:
        """One Messages call read to its end; ``calls``: the (tool_use id, tool) it asked for."""
        run, session, model = grant.run_id, session[:NAME_MAX], model[:NAME_MAX]
        span_id = new_span_id()
        attributes: dict[str, Attribute] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": request_model[:NAME_MAX], "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
            "flower.cost_usd": usage.cost_usd, "http.response.status_code": status, "flower.run.id": run,
            "flower.session": session, "flower.agent": agent[:NAME_MAX]}
        parent = self._parent(run, session, agent, start, end)
        self.exporter.send(Span(grant.tenant, run, f"chat {model}", span_id, parent, start, end, attributes,
                                None if status < 400 else f"the upstream answered {status}"))
        for tool_use_id, tool in calls[:1000]:
            opened = _Open(grant.tenant, tool[:NAME_MAX], end, span_id, new_span_id())
            self._tools[(run, tool_use_id[:NAME_MAX])] = opened
            if tool in AGENT_TOOLS:
                self._launched[run] = opened.span_id
        while len(self._tools) > MAX_OPEN_TOOLS:
            (old_run, old_id), old = self._tools.popitem(last=False)
            self._tool_span(old_run, old_id, old, None)

    def _parent(self, run: str, session: str, agent: str, start: float, end: float) -> int:
        if agent == "main":
            return attempt_parent(run, session)
        agents = self._agents.setdefault(run, {})
        found = agents.get(agent)
        if found is None:
            if len(agents) >= MAX_AGENTS:
                return attempt_parent(run, session)
            parent = self._launched.get(run) or attempt_parent(run, session)
            found = agents[agent] = _Agent(new_span_id(), parent, start, end)
        found.end, found.calls = max(found.end, end), found.calls + 1
        return found.span_id

    def results(self, grant: Grant, results: Iterable[ToolResult]) -> None:
        """The tool results a request carries back: each closes the span of a call the wire saw."""
        for result in results:
            opened = self._tools.pop((grant.run_id, result.tool_use_id), None)
            if opened is not None:
                self._tool_span(grant.run_id, result.tool_use_id, opened, result.kind)

    def _tool_span(self, run: str, tool_use_id: str, opened: _Open, kind: str | None) -> None:
        end = max(opened.start, self.now())
        attributes: dict[str, Attribute] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": opened.tool,
            "gen_ai.tool.call.id": tool_use_id, "flower.tool.denied": kind == "deny",
            "flower.tool.spilled": kind == "spill", "flower.tool.error": kind in ("deny", "error"),
            "flower.tool.duration_s": end - opened.start, "flower.run.id": run}
        if kind is None:
            attributes["flower.tool.unfinished"] = True
        self.exporter.send(Span(opened.tenant, run, f"execute_tool {opened.tool}", opened.span_id, opened.parent,
                                opened.start, end, attributes))

    def closed(self, grant: Grant) -> None:
        """The run's grant closed: its subagents' spans, and its tool calls no result came back for."""
        run = grant.run_id
        for key in [k for k in self._tools if k[0] == run]:
            self._tool_span(run, key[1], self._tools.pop(key), None)
        for agent, found in self._agents.pop(run, {}).items():
            self.exporter.send(Span(grant.tenant, run, "subagent", found.span_id, found.parent, found.start,
                                    found.end, {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": agent,
                                                "flower.agent.model_calls": found.calls, "flower.run.id": run}))
        self._launched.pop(run, None)

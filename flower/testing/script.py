"""What the scripted model says: answers, faults, and the rules that pick them.

A script is a list of `Rule`s. For each request the first rule that matches and
still has answers left answers it; a rule's answers are used one per request, in
order. Matching looks only at what the request carries, so the same script drives
the main thread, subagents and resumed sessions alike.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Pattern, Union

_ids = itertools.count(1)


@dataclass
class ToolUse:
    name: str
    input: dict[str, Any]
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = f"toolu_scripted_{next(_ids):06d}"


@dataclass
class Reply:
    """One assistant message: optional text, then tool calls (several per turn allowed)."""

    text: str = ""
    tools: list[ToolUse] = field(default_factory=list)
    usage: dict[str, int] | None = None
    stop_reason: str | None = None
    delay: float = 0.0

    @property
    def stop(self) -> str:
        return self.stop_reason or ("tool_use" if self.tools else "end_turn")


@dataclass
class Fault:
    """An HTTP error with the API's error body, or a connection dropped mid-stream."""

    status: int = 500
    kind: str = "api_error"
    message: str = "Internal server error"
    drop: bool = False
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        return json.dumps({"type": "error", "error": {"type": self.kind, "message": self.message}}).encode()


Answer = Union[Reply, Fault, Callable[["Request"], Union[Reply, Fault]]]

_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_MESSAGES = {
    401: "invalid x-api-key",
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error",
    529: "Overloaded",
}


def say(text: str, *, usage: dict[str, int] | None = None, delay: float = 0.0) -> Reply:
    return Reply(text=text, usage=usage, delay=delay)


def call(name: str, input: dict[str, Any] | None = None, *, id: str = "") -> ToolUse:
    return ToolUse(name, dict(input or {}), id)


def calls(*uses: ToolUse, text: str = "", usage: dict[str, int] | None = None) -> Reply:
    return Reply(text=text, tools=list(uses), usage=usage)


def tool(name: str, input: dict[str, Any] | None = None, *, text: str = "", usage: dict[str, int] | None = None) -> Reply:
    """A turn with a single tool call — the common case."""
    return calls(call(name, input), text=text, usage=usage)


def fail(status: int, message: str | None = None, *, delay: float = 0.0, headers: dict[str, str] | None = None) -> Fault:
    return Fault(status, _KINDS.get(status, "api_error"), message or _MESSAGES.get(status, f"HTTP {status}"),
                 delay=delay, headers=dict(headers or {}))


def too_long(tokens: int = 250_000, maximum: int = 200_000) -> Fault:
    return Fault(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {maximum} maximum")


def drop(*, delay: float = 0.0) -> Fault:
    """The connection closes after the stream has started."""
    return Fault(drop=True, delay=delay)


Text = Union[str, Pattern[str], None]


def _hit(pattern: Text, text: str) -> bool:
    if pattern is None:
        return True
    if isinstance(pattern, str):
        return pattern in text
    return bool(pattern.search(text))


@dataclass
class Request:
    """One request as the scripted model saw it; kept for assertions and figures."""

    n: int
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    size: int
    side: bool = False
    rule: str | None = None
    status: int = 200
    usage: dict[str, int] | None = None
    """The usage the answer carried (the figures a gateway must meter)."""
    header_list: list[tuple[str, str]] = field(default_factory=list)
    """Every header line as sent, in order (``headers`` keeps one value per name)."""

    @property
    def session(self) -> str | None:
        return self.headers.get("x-claude-code-session-id")

    @property
    def agent(self) -> str | None:
        return self.headers.get("x-claude-code-agent-id")

    @property
    def retry(self) -> int:
        return int(self.headers.get("x-stainless-retry-count") or 0)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages") or []

    @property
    def system(self) -> str:
        sys_ = self.body.get("system") or ""
        if isinstance(sys_, str):
            return sys_
        return "\n".join(b.get("text", "") for b in sys_ if isinstance(b, dict))

    @property
    def tools(self) -> list[str]:
        return [t.get("name", "") for t in self.body.get("tools") or []]

    @property
    def prompt(self) -> str:
        """Text of the first user message: the task this conversation was given — without the context the CLI
        attaches to it in ``<system-reminder>`` blocks (git status, attribution lines, …), which the bundled CLI
        puts first and which is not what anyone asked."""
        for m in self.messages:
            if m.get("role") == "user":
                return _REMINDER.sub("", _texts(m)).strip("\n")
        return ""

    @property
    def user(self) -> str:
        """Text of the last user message, tool results excluded."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                return _texts(m)
        return ""

    @property
    def results(self) -> list[dict[str, Any]]:
        """tool_result blocks of the last user message, content flattened to `text`."""
        last = next((m for m in reversed(self.messages) if m.get("role") != "system"), None)  # CLI nudges
        if not last or last.get("role") != "user":
            return []
        content = last.get("content")
        if not isinstance(content, list):
            return []
        out = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                c = b.get("content")
                text = c if isinstance(c, str) else "\n".join(x.get("text", "") for x in c or [] if isinstance(x, dict))
                out.append({"id": b.get("tool_use_id"), "is_error": bool(b.get("is_error")), "text": text})
        return out

    @property
    def result_text(self) -> str:
        return "\n".join(r["text"] for r in self.results)

    @property
    def is_subagent(self) -> bool:
        return bool(self.agent) or "cc_is_subagent=true" in self.system

    def __repr__(self) -> str:
        """What a rule matches on, shortened (of the system text, its first heading: a role's prompt begins with
        one): a failed ``model.unmatched == []`` says which request no rule answered, not tens of kilobytes."""
        def head(text: str) -> str:
            text = " ".join(text.split())
            return text[:80] + ("…" if len(text) > 80 else "")

        return (f"Request(n={self.n}, rule={self.rule!r}, retry={self.retry}, subagent={self.is_subagent}, "
                f"heading={head(next((ln for ln in self.system.splitlines() if ln.startswith('# ')), ''))!r}, "
                f"prompt={head(self.prompt)!r}, user={head(self.user)!r}, "
                f"results={head(self.result_text)!r})")


_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>\n*", re.DOTALL)
"""A block of context the CLI adds to a user message (``Request.prompt`` leaves it out)."""


def _texts(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


@dataclass
class Rule:
    """Answers, and what a request must carry to get them.

    prompt: in the conversation's first user text; user: in the last user text;
    result: in the last message's tool results (`error=True` for error results only);
    system: in the system text; agent: True for subagents, False for the main thread,
    or a substring of the subagent id; session: the session id; nth: only the n-th
    request (1-based) that meets the other conditions; when: any predicate; role: one
    of the role matchers (``CLARIFIER``, ``JUDGE``, ``COORDINATOR``, ``WORKER``, ``ORACLE``).
    `repeat` keeps answering with the last answer once the others are used.
    """

    answers: list[Answer]
    prompt: Text = None
    user: Text = None
    result: Text = None
    error: bool | None = None
    system: Text = None
    agent: bool | str | None = None
    session: str | None = None
    when: Callable[[Request], bool] | None = None
    role: Callable[[Request], bool] | None = None
    nth: int | None = None
    repeat: bool = False
    name: str = ""
    used: int = 0
    seen: int = 0

    def __init__(self, *answers: Answer | list[Answer], prompt: Text = None, user: Text = None,
                 result: Text = None, error: bool | None = None, system: Text = None,
                 agent: bool | str | None = None, session: str | None = None,
                 when: Callable[[Request], bool] | None = None, role: Callable[[Request], bool] | None = None,
                 nth: int | None = None, repeat: bool = False, name: str = "") -> None:
        flat: list[Answer] = []
        for a in answers:
            flat.extend(a if isinstance(a, list) else [a])
        self.answers = [Reply(tools=[a]) if isinstance(a, ToolUse) else a for a in flat]
        self.prompt, self.user, self.result, self.error = prompt, user, result, error
        self.system, self.agent, self.session, self.when, self.role = system, agent, session, when, role
        self.nth, self.repeat, self.used, self.seen = nth, repeat, 0, 0
        self.name = name or self._describe()

    def _describe(self) -> str:
        parts = [f"role={getattr(self.role, 'name', self.role)}"] if self.role is not None else []
        parts += [f"{k}={v!r}" for k, v in (("prompt", self.prompt), ("user", self.user), ("result", self.result),
                                          ("agent", self.agent)) if v is not None]
        return "Rule(" + ", ".join(parts) + ")"

    def matches(self, req: Request) -> bool:
        if self.used >= len(self.answers) and not (self.repeat and self.answers):
            return False
        if self.agent is True and not req.is_subagent:
            return False
        if self.agent is False and req.is_subagent:
            return False
        if isinstance(self.agent, str) and self.agent not in (req.agent or ""):
            return False
        if self.session is not None and req.session != self.session:
            return False
        if self.error is not None and not any(r["is_error"] == self.error for r in req.results):
            return False
        if self.result is not None and not (req.results and _hit(self.result, req.result_text)):
            return False
        if not (_hit(self.prompt, req.prompt) and _hit(self.user, req.user) and _hit(self.system, req.system)):
            return False
        if self.role is not None and not self.role(req):
            return False
        if self.when is not None and not self.when(req):
            return False
        self.seen += 1
        return self.nth is None or self.seen == self.nth

    def take(self, req: Request) -> Reply | Fault:
        answer = self.answers[min(self.used, len(self.answers) - 1)]
        self.used += 1
        return answer(req) if callable(answer) and not isinstance(answer, (Reply, Fault)) else answer


def pattern(regex: str) -> Pattern[str]:
    return re.compile(regex, re.S)

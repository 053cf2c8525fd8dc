"""What the gateway reads off the model traffic: usage and cost, the tool calls the model asks for, and
what the CLI sends back (our guards' deny texts, spill pointers); and, before a request is forwarded, what it
asks for (``Ask``): the server-side tools it would have the provider run, and the most it can cost.

The run cannot forge or suppress this: tool calls come from the model's answers, which pass only
through the gateway. The tool results come from the run, so they are what the model was *told* — still a
record the run cannot erase after the fact. Recognising a guard's text is by fingerprint (the phrases
below are taken from ``flower.core.guard``'s deny reasons and its spill pointer; the wire-audit test
drives the real guards through the real CLI, so a changed text fails there).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec

__all__ = ["Usage", "ToolCall", "ToolResult", "ResponseReader", "tool_results", "cost_of", "PRICES",
           "DENY_MARKS", "SPILL_MARK", "Ask", "SERVER_TOOLS", "FETCHED_SOURCES", "server_tools", "Contents", "contents",
           "most_cost"]

# USD per million tokens: (input, output). Cache writes cost 1.25x input, cache reads 0.1x (Anthropic's
# published prices). The first entry whose key is in the model name wins; a config may extend the table.
PRICES: dict[str, tuple[float, float]] = {
    "opus-4-5": (5.0, 25.0), "opus-4-6": (5.0, 25.0), "opus-4-7": (5.0, 25.0), "opus": (15.0, 75.0),
    "sonnet": (3.0, 15.0), "haiku-4": (1.0, 5.0), "haiku-3-5": (0.8, 4.0), "3-5-haiku": (0.8, 4.0),
    "haiku": (0.25, 1.25),
}
DEFAULT_PRICE = PRICES["sonnet"]

DENY_MARKS = ("这是有意的设计,不是配置遗漏", "协调者不亲自动手", "隔离失败:角色")
SPILL_MARK = re.compile(r"\[输出共 (\d+) 字,已落盘到 ([^;\]]+);")


class Usage(msgspec.Struct, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, other: "Usage") -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_creation_input_tokens += other.cache_creation_input_tokens
        self.cache_read_input_tokens += other.cache_read_input_tokens
        self.cost_usd += other.cost_usd


class ToolCall(msgspec.Struct, frozen=True):
    id: str
    tool: str


class ToolResult(msgspec.Struct, frozen=True):
    tool_use_id: str
    kind: Literal["deny", "spill", "error", "ok"]
    text: str


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def _usage(raw: object, into: Usage) -> None:
    """Fold an answer's ``usage`` object in (later values win: message_delta carries the final counts)."""
    if not isinstance(raw, dict):
        return
    for name in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        if name in raw and raw[name] is not None:
            setattr(into, name, _count(raw[name]))


IMAGE_TOKENS = 5_000  # the most one image costs: the API scales a picture down to its largest (~4,800 tokens)
DOCUMENT_TOKENS = 300_000  # the most one PDF (or fetched) document costs: 100 pages at up to 3,000 tokens each
MAX_INPUT_TOKENS = 1_000_000  # no request's input is more than the largest context window


def most_cost(ask: Ask, size: int, prices: Mapping[str, tuple[float, float]] | None = None,
              unbounded: int | None = None) -> float:
    """The most a request of ``size`` bytes can cost: every byte an input token written to the cache (a token stands
    for at least one byte of the text it encodes, JSON only adds bytes, and a cache write is the dearest input at
    1.25x) and what images and documents add beyond their bytes (``Contents.unbounded``, read again unless given)
    — no more than a context window holds — and all of ``max_tokens`` as output. What a budget holds for the call
    while it is in flight."""
    inp, out = price_of(ask.model, prices)
    extra = contents(ask).unbounded if unbounded is None else unbounded
    return (min(size + extra, MAX_INPUT_TOKENS) * inp * 1.25 + ask.max_tokens * out) / 1e6


def price_of(model: str, prices: Mapping[str, tuple[float, float]] | None = None) -> tuple[float, float]:
    """USD per million (input, output) tokens: the config's table first, then ours."""
    for table in (prices or {}, PRICES):
        for key, price in table.items():
            if key in model:
                return price
    return DEFAULT_PRICE


def cost_of(model: str, usage: Usage, prices: Mapping[str, tuple[float, float]] | None = None) -> float:
    inp, out = price_of(model, prices)
    return (usage.input_tokens * inp + usage.output_tokens * out
            + usage.cache_creation_input_tokens * inp * 1.25 + usage.cache_read_input_tokens * inp * 0.1) / 1e6


# Tools the provider runs on its own side, reaching the network for the run (named by their `type` without its date;
# `mcp_servers` is the body's field, and the `mcp_toolset` tool type that uses it). A tenant may allow them by name.
# Beside them, the content a provider fetches for the run (``Contents.fetched``): a block whose source is a URL reaches
# the network as a tool would, and a file source reads what was uploaded with the tenant's key (any run's, any
# person's) — allowed by the same list, with open egress only.
FETCHED_SOURCES = ("url_sources", "file_sources")
SERVER_TOOLS = ("web_search", "web_fetch", "code_execution", "tool_search_tool_regex", "tool_search_tool_bm25",
                "mcp_servers", *FETCHED_SOURCES)
_DATED = re.compile(r"_\d{8}$")


class _ToolSpec(msgspec.Struct):
    type: str | None = None


class _Source(msgspec.Struct):
    """A content block's ``source``: only what says where the provider would get its content from."""

    type: str | None = None
    url: str | None = None
    file_id: str | None = None
    content: "str | list[_Block] | _Block | None" = None  # a document's own blocks (``"type": "content"``)


class _Block(msgspec.Struct):
    """A content block, anywhere in a request (a message's, the system prompt's, a tool result's, a document's):
    its text is skipped, not decoded; what it holds is walked down to its sources."""

    type: str | None = None
    source: "_Source | str | None" = None  # a search result's source is its label, a string
    content: "str | list[_Block] | _Block | None" = None  # one block: a server tool's result (web_fetch's)
    file_id: str | None = None  # a ``container_upload``'s, or a code execution's output file


class _Message(msgspec.Struct):
    content: str | list[_Block] = ""


class Ask(msgspec.Struct):
    """What the gateway reads of a request before forwarding it: the model, ``max_tokens``, the tools, and of the
    conversation (messages, system prompt) only the blocks' types and sources — their text is skipped, not decoded.
    Duplicate keys: the last one wins, here as in the JSON parsers of the common stacks (or they refuse)."""

    model: str = ""
    max_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0
    tools: list[_ToolSpec] | None = None
    mcp_servers: list[msgspec.Raw] | None = None
    messages: list[_Message] = []
    system: str | list[_Block] | None = None


def server_tools(ask: Ask) -> list[str]:
    """The tools of a request the provider would run itself: every tool with a `type` but `custom` (a client tool
    has none), by its name without the date, and `mcp_servers` when the body names any."""
    names = [_DATED.sub("", t.type) for t in ask.tools or () if t.type is not None and t.type != "custom"]
    names = ["mcp_servers" if n == "mcp_toolset" else n[:100] for n in names]
    if ask.mcp_servers:
        names.append("mcp_servers")
    return list(dict.fromkeys(names))


def _blocks(ask: Ask) -> Iterator[tuple[_Block, _Source | None]]:
    """Every content block of a request with its source, wherever it sits (messages, system prompt, tool results,
    documents' own blocks, a server tool's result)."""
    stack: list[str | list[_Block] | _Block | None] = [ask.system, *(m.content for m in ask.messages)]
    while stack:
        here = stack.pop()
        if isinstance(here, _Block):
            here = [here]
        elif not isinstance(here, list):
            continue  # text, or nothing
        for block in here:
            source = block.source if isinstance(block.source, _Source) else None
            yield block, source
            if source is not None and source.content is not None:
                stack.append(source.content)
            if block.content is not None and not isinstance(block.content, str):
                stack.append(block.content)


@dataclass(frozen=True)
class Contents:
    """What a request's content blocks tell the gateway, read in one walk of them (``contents``)."""

    fetched: dict[str, list[str]]
    """The content the provider would fetch for it: ``url_sources`` and ``file_sources`` → the block types that ask
    for it (``document``, ``image``, ``container_upload``)."""
    unbounded: int
    """Input tokens its bytes do not bound: an image costs by its pixels (a small PNG can stand for a large picture),
    a document that is not plain text by its pages (a PDF's, or one fetched from a URL or a file)."""


def contents(ask: Ask) -> Contents:
    """Every content block of ``ask``, wherever it sits, read once: what it fetches and what it may cost."""
    found: dict[str, list[str]] = {}
    extra = 0
    for block, source in _blocks(ask):
        kind = block.type
        if kind == "image":
            extra += IMAGE_TOKENS
        elif kind == "document" and source is not None and source.type not in ("text", "content"):
            extra += DOCUMENT_TOKENS
        if kind == "container_upload":  # (a tool's output file has a file_id too: it is no upload)
            _found(found, "file_sources", kind)
        if source is None:
            continue
        if source.type == "url" or source.url is not None:
            _found(found, "url_sources", kind)
        if source.type == "file" or source.file_id is not None:
            _found(found, "file_sources", kind)
    return Contents(found, extra)


def _found(found: dict[str, list[str]], kind: str, block_type: str | None) -> None:
    names = found.setdefault(kind, [])
    if (name := (block_type or "block")[:40]) not in names:
        names.append(name)


class ResponseReader:
    """Fed the bytes of one answer as they stream past (SSE or one JSON body); keeps usage and tool calls.

    Bounded: a line longer than ``max_line`` is skipped, the JSON body is read only up to ``max_body``."""

    def __init__(self, *, stream: bool, max_line: int = 1 << 20, max_body: int = 32 << 20) -> None:
        self.stream = stream
        self.usage = Usage()
        self.model = ""
        self.calls: list[ToolCall] = []
        self._buf = bytearray()
        self._max_line, self._max_body = max_line, max_body
        self._skipping = False

    def feed(self, chunk: bytes) -> None:
        if not self.stream:
            if len(self._buf) + len(chunk) <= self._max_body:
                self._buf += chunk
            return
        self._buf += chunk
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                if len(self._buf) > self._max_line:
                    self._buf.clear()
                    self._skipping = True
                return
            line = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            if self._skipping:
                self._skipping = False
                continue
            if line.startswith(b"data:"):
                self._event(line[5:].strip())

    def close(self) -> None:
        """The answer ended: a JSON body is parsed now."""
        if not self.stream and self._buf:
            self._message(_loads(bytes(self._buf)))
            self._buf.clear()

    def _event(self, data: bytes) -> None:
        ev = _loads(data)
        kind = ev.get("type")
        if kind == "message_start" and isinstance(ev.get("message"), dict):
            self.model = str(ev["message"].get("model") or "")[:200]
            _usage(ev["message"].get("usage"), self.usage)
        elif kind == "message_delta":
            _usage(ev.get("usage"), self.usage)
        elif kind == "content_block_start" and isinstance(ev.get("content_block"), dict):
            self._block(ev["content_block"])

    def _message(self, msg: dict[str, Any]) -> None:
        self.model = str(msg.get("model") or "")[:200]
        _usage(msg.get("usage"), self.usage)
        for block in msg.get("content") or []:
            if isinstance(block, dict):
                self._block(block)

    def _block(self, block: dict[str, Any]) -> None:
        if block.get("type") in ("tool_use", "server_tool_use") and len(self.calls) < 1000:
            self.calls.append(ToolCall(str(block.get("id") or "")[:200], str(block.get("name") or "")[:200]))


def _loads(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


TEXT_HEAD = 8000  # of a tool result: our guards' texts and spill pointers come first, the rest is never read


def _text(content: object) -> str:
    if isinstance(content, str):
        return content[:TEXT_HEAD]
    if isinstance(content, list):
        return "\n".join(str(b.get("text", ""))[:TEXT_HEAD] for b in content[:100] if isinstance(b, dict))[:TEXT_HEAD]
    return ""


def tool_results(body: dict[str, Any]) -> Iterable[ToolResult]:
    """The tool results of a request's last message (the CLI re-sends the whole conversation each time:
    only the last user turn is new)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    last = next((m for m in reversed(messages[-8:]) if isinstance(m, dict) and m.get("role") != "system"), None)
    if last is None or last.get("role") != "user" or not isinstance(last.get("content"), list):
        return
    for block in last["content"][:1000]:
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        text = _text(block.get("content"))
        if block.get("is_error") and any(m in text for m in DENY_MARKS):
            kind: Literal["deny", "spill", "error", "ok"] = "deny"
        elif SPILL_MARK.search(text):
            kind = "spill"
        else:
            kind = "error" if block.get("is_error") else "ok"
        yield ToolResult(str(block.get("tool_use_id") or "")[:200], kind, text)

"""The human channel's MCP server: the model's ``ask`` and ``inbox`` tools, always together.

The factory only needs the two operations behind the tools (``ChannelOps``), so it is
tested and reused without a whole channel.
"""

from __future__ import annotations

from typing import Any, Protocol

from claude_agent_sdk import McpSdkServerConfig, SdkMcpTool, create_sdk_mcp_server, tool

from .asks import Ask

__all__ = ["SERVER", "ASK_TOOL", "INBOX_TOOL", "NO_MESSAGES", "ASK_DESCRIPTION", "INBOX_DESCRIPTION",
           "ChannelOps", "channel_server", "CLI_MAX_MS"]

SERVER = "human"
ASK_TOOL = f"mcp__{SERVER}__ask"
INBOX_TOOL = f"mcp__{SERVER}__inbox"
NO_MESSAGES = "没有新消息"
CLI_MAX_MS = 2_147_483_647  # the CLI clamps MCP tool timeouts to this

ASK_DESCRIPTION = (
    "向人提一个问题并等待回答。只在你确实无法自己判断、而且猜错代价大时才问;一次只问一件事,问具体。"
    "给了 options 时,人可以回编号或原文。没人回答时会明确告诉你,那时就自己决定并写下假设。"
)
INBOX_DESCRIPTION = "查看人在你工作期间主动发来的消息(读过即清空)。开始一块新工作前看一眼;没有时返回“没有新消息”。"

ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "要问的问题,具体、一次一件事"},
        "options": {"type": "array", "items": {"type": "string"}, "description": "可选:候选答案"},
    },
    "required": ["question"],
}


class ChannelOps(Protocol):
    """What the two tools call."""

    async def ask(self, question: str, options: list[str] | None = None) -> Ask: ...

    def reply_text(self, a: Ask) -> str: ...

    def inbox(self) -> list[str]: ...


def _ask_tool(ops: ChannelOps) -> SdkMcpTool[Any]:
    @tool("ask", ASK_DESCRIPTION, ASK_SCHEMA)
    async def ask(args: dict[str, Any]) -> dict[str, Any]:
        options = [str(o) for o in args.get("options") or [] if str(o).strip()]
        a = await ops.ask(str(args.get("question") or ""), options)
        reply: dict[str, Any] = {"content": [{"type": "text", "text": ops.reply_text(a)}]}
        if a.state == "invalid":
            reply["is_error"] = True
        return reply

    return ask


def _inbox_tool(ops: ChannelOps) -> SdkMcpTool[Any]:
    @tool("inbox", INBOX_DESCRIPTION, {"type": "object", "properties": {}})
    async def inbox(args: dict[str, Any]) -> dict[str, Any]:
        messages = ops.inbox()
        if not messages:
            text = NO_MESSAGES
        else:
            text = "人在你工作期间发来的消息(按时间先后):\n" + "\n".join(
                f"{i}. {m.strip()}" for i, m in enumerate(messages, 1)
            )
        return {"content": [{"type": "text", "text": text}]}

    return inbox


def cli_timeout_ms(timeout_s: float | None) -> int:
    """The CLI's own per-call limit, kept above the channel's so the channel's timeout is the one that fires."""
    if timeout_s is None:
        return CLI_MAX_MS
    return min(CLI_MAX_MS, int(max(0.0, timeout_s) * 1000) + 60_000)


def channel_server(ops: ChannelOps, timeout_s: float | None) -> McpSdkServerConfig:
    """The in-process server ``human`` with both tools.

    Three keys beyond the SDK's config, read by the CLI from --mcp-config: the tools are in
    the prompt from the start (not deferred behind ToolSearch); a call that waits on a person
    is never moved to a background task; and the CLI's per-call limit stays above ours.
    """
    server = create_sdk_mcp_server(SERVER, tools=[_ask_tool(ops), _inbox_tool(ops)])
    extra: dict[str, Any] = {"alwaysLoad": True, "disableAutoBackground": True, "timeout": cli_timeout_ms(timeout_s)}
    server.update(extra)  # type: ignore[typeddict-item]  # CLI keys the SDK's TypedDict does not list
    return server

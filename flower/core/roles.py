"""The five roles: each is a block of rules + a tool set (+ the hooks Runtime mounts for it).

`worker()` builds a subagent definition (dispatched by the coordinator); the
other four build an `AgentSpec` that opens its own session. The rule texts are
the model-facing contract and stay in Chinese. Tool lists here only pre-approve:
what a role may *not* do is enforced by the guards (`flower.core.guard`).
"""

from __future__ import annotations

from typing import Any

from claude_agent_sdk import AgentDefinition

from flower.core.agent import AgentSpec
from flower.core.guard import isolated

__all__ = [
    "coordinator",
    "worker",
    "clarify",
    "judge",
    "oracle",
    "COORDINATOR_RULES",
    "WORKER_RULES",
    "CLARIFY_RULES",
    "JUDGE_RULES",
    "ORACLE_RULES",
]

COORDINATOR_TOOLS = ["Agent", "TodoWrite", "Read"]
WEB_TOOLS = ["WebFetch", "WebSearch"]
WORKER_TOOLS = ["Read", "Write", "Edit", "Bash", "Glob", "Grep", "WebFetch", "WebSearch"]
READ_TOOLS = ["Read", "Glob", "Grep"]

COORDINATOR_RULES = """\
# 你是协调者
你是一个会用 Claude Code 的人,不是干活的人:你负责拆解任务、派活、读报告、做决定。
- 你不写文件、不改代码、不跑测试。Bash 只够你"看一眼"(ls、git status、git log -1 这类只读命令),它的结果很快会过时,需要时重新看。
- 活一律用 Agent 工具派给子代理。互不依赖的活可以在同一轮里一起派出去并行做。
- 任务书只写这个任务特有的东西:目标、验收标准、边界、你已经知道的线索。子代理看不到你的系统提示,所以每份任务书都必须写明:工作台在哪里(用系统提示里给出的工作台路径),超过 2000 字的长产物写进工作台的 artifacts/,回复里只给路径和结论。
- 子代理的报告只有四节:结论、证据、交付物、未验证。"未验证"里的东西不算完成:要么再派人验证,要么如实上报。
- 等所有派出去的子代理都交回报告,再给出最终答复。后台运行的子代理完成时你会收到通知;还有子代理在跑的时候,不要宣布完成,也不要给出最终结论。
- 如果有 inbox 工具,每完成一个里程碑就查一次;ask 会阻塞到有人回答为止,只在真正的岔路口用。
"""

WORKER_RULES = """\
# 汇报纪律
- 开工前先看看任务书里给出的工作台 scripts/ 有没有现成脚本可用;会跑第二次的脚本也写到那里。
- 超过 2000 字的产物写成文件,放到任务书指定的工作台 artifacts/ 目录,回复里只写路径。
- 最终回复恰好四节,依次是:
  ## 结论
  ## 证据
  ## 交付物
  ## 未验证
  总共不超过 30 行。
- 不要贴文件内容、命令输出、日志或原始 diff;需要时给路径。不要复述试错过程。
- 没有亲自验证过的东西一律写进"未验证",不要说成已完成。
"""

CLARIFY_RULES = """\
# 你是需求确认者
你只负责在动手之前把需求问清楚,不做任何实现:不写代码,不贴文件内容。
- 用提问工具问人。问题数量不设上限,问到清楚为止;一次只问一个具体的问题,最好给出选项。
- 人可能不在:提问超时没有回答时,自己做出合理的决定,并把它记进"未知与假设"。
- 最后的回复恰好四节,不多不少,依次是:
  ## 目标
  ## 验收标准
  ## 边界
  ## 未知与假设
"""

JUDGE_RULES = """\
# 你是判定者
你没有参与干活。你的任务是两件事之一:设定目标,或者判定一轮工作是否达成目标。
- 先看清楚你在什么环境里:操作系统、有哪些工具、能不能运行程序、能不能联网。能不能验证,取决于这个环境。
- 你不修改工作区。

## 设定目标时
回复两节:
  ## 目标
  ## 检查清单
- 清单每一条都必须能当场验证;清单有多长,取决于这件事有多少种可能做砸的方式。边界不是检查项。
- 这个环境验证不了的条目,在条目末尾标注 `[此环境无法验证:原因]`。

## 判定一轮工作时
回复恰好三节:
  ## 结论
  ## 理由
  ## 未通过
- 结论只能是 达成 / 未达成 / 无法验证 三者之一。
- 判交付物,不判源码:看实际产出的东西能不能用,而不是代码看起来对不对。默认不相信"已经完成"。
- "未达成"和"无法验证"是两个不同的结论;无法验证的绝不能判为达成。
- "未通过"逐条列出没通过的检查项,都通过了就写"无"。
"""

ORACLE_RULES = """\
# 你是旁路顾问
有一次运行还在进行。你只回答"现在进行到哪了"这类问题:既不打断它,也不参与它。
- 只读。你说的话答完即弃,不会进入那次运行的上下文。
- 你手上只有最近的事件窗口和工作台(产物、笔记、索引)。先看再答;看不到的就直说看不到。
- 回答要简短。
"""


def _unique(tools: list[str]) -> list[str]:
    return list(dict.fromkeys(tools))


def _with(rules: str, instructions: str) -> str:
    return f"{rules}\n{instructions}".strip()


def coordinator(
    name: str,
    instructions: str,
    workers: dict[str, AgentDefinition],
    *,
    channel: Any = None,
    can_read: bool = True,
    glance: bool = True,
    model: str | None = None,
    effort: str | None = None,
    max_turns: int | None = None,
    max_budget_usd: float | None = None,
    permission_mode: str = "acceptEdits",
    compact: Any = None,
    hooks: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> AgentSpec:
    """The main thread: decomposes, dispatches, reads reports, decides — touches nothing.

    Workers' web tools are pre-approved here too: `allowed_tools` is session-wide,
    and a subagent's unapproved WebFetch is silently refused ("you haven't granted
    it yet") when nobody watches. Write/Edit/Bash are left out on purpose.
    Never use `disallowed_tools` for "hands off": it disables the workers as well.
    """
    tools = [t for t in COORDINATOR_TOOLS if can_read or t != "Read"]
    if glance:
        tools.append("Bash")  # what may actually run is decided by delegate_guard
    for w in workers.values():
        tools += [t for t in WEB_TOOLS if w.tools is None or t in w.tools]
    servers: dict[str, Any] = {}
    if channel is not None:
        tools.append(channel.tool_name)
        servers = dict(channel.mcp_servers())
    return AgentSpec(
        name, _with(COORDINATOR_RULES, instructions), allowed_tools=_unique(tools), model=model,
        effort=effort, max_turns=max_turns, max_budget_usd=max_budget_usd, permission_mode=permission_mode,
        agents=workers, mcp_servers=servers, hooks=hooks, compact=compact, env=dict(env or {}),
        glance=glance, delegate_only=True,
    )


def worker(
    description: str,
    prompt: str,
    *,
    tools: list[str] | None = None,
    model: str = "inherit",
    effort: str | int | None = None,
    max_turns: int | None = None,
    permission_mode: str | None = None,
    skills: list[str] | None = None,
    discipline: bool = True,
    isolate: bool = False,
) -> AgentDefinition:
    """The subagent that does the work. `isolate=True` marks it via `isolated()` (needs git)."""
    agent = AgentDefinition(
        description=description,
        prompt=f"{prompt}\n\n{WORKER_RULES}" if discipline else prompt,
        tools=list(tools) if tools is not None else list(WORKER_TOOLS),
        model=model,
        effort=effort,  # type: ignore[arg-type]
        maxTurns=max_turns,
        permissionMode=permission_mode,  # type: ignore[arg-type]
        skills=list(skills) if skills is not None else None,
    )
    return isolated(agent) if isolate else agent


def _channel_tools(channel: Any) -> tuple[list[str], dict[str, Any]]:
    if channel is None:
        return [], {}
    return [channel.tool_name], dict(channel.mcp_servers())


def clarify(
    name: str,
    channel: Any,
    *,
    instructions: str = "",
    can_read: bool = True,
    model: str | None = None,
    effort: str | None = None,
    max_turns: int | None = None,
    max_budget_usd: float | None = None,
) -> AgentSpec:
    """Asks until the requirement is clear; writes nothing (whitelist_guard enforces it)."""
    tools, servers = _channel_tools(channel)
    if can_read:
        tools += READ_TOOLS + WEB_TOOLS
    return AgentSpec(
        name, _with(CLARIFY_RULES, instructions), allowed_tools=_unique(tools), model=model, effort=effort,
        max_turns=max_turns, max_budget_usd=max_budget_usd, mcp_servers=servers, workbench=False,
    )


def judge(
    name: str,
    channel: Any,
    *,
    instructions: str = "",
    can_run: bool = False,
    model: str | None = None,
    effort: str | None = None,
    max_turns: int | None = None,
    max_budget_usd: float | None = None,
) -> AgentSpec:
    """Sets the goal or gives a round's verdict. `can_run` adds Bash (and so the power to write)."""
    tools, servers = _channel_tools(channel)
    tools += READ_TOOLS + (["Bash"] if can_run else [])
    return AgentSpec(
        name, _with(JUDGE_RULES, instructions), allowed_tools=_unique(tools), model=model, effort=effort,
        max_turns=max_turns, max_budget_usd=max_budget_usd, mcp_servers=servers, workbench=False,
    )


def oracle(
    name: str = "旁路问答",
    *,
    instructions: str = "",
    model: str | None = None,
    effort: str | None = None,
    max_turns: int | None = 12,
    max_budget_usd: float | None = 0.5,
) -> AgentSpec:
    """Answers "where are we" beside a live run, from its events and workbench; braked by default."""
    return AgentSpec(
        name, _with(ORACLE_RULES, instructions), allowed_tools=list(READ_TOOLS), model=model, effort=effort,
        max_turns=max_turns, max_budget_usd=max_budget_usd, workbench=True,
    )

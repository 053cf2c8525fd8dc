"""Every line the ``flower`` command says to a person, in English and in Chinese — one catalogue.

``t(key, **fields)`` picks the language each time it is called: Chinese when ``FLOWER_LANG``, else
``LC_ALL``, else ``LC_MESSAGES``, else ``LANG`` starts with ``zh``; English otherwise. What the seed fixes
stays as it is in both languages and is passed in as a field: step names (确认需求, 设定目标, 工作),
document titles and default file names (需求.md, 目标.md, 问答记录.md), and the model-facing texts. In English
they are shown with a gloss (``name``, ``doc``, ``verdict``): ``工作 (work)``, ``achieved (达成)``.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from ..core.language import LANG_VARS as LANG_VARS, language as language  # re-exported for the callers



def t(key: str, /, **fields: object) -> str:
    """The message ``key`` in the user's language, its ``{fields}`` filled in."""
    en, zh = MESSAGES[key]
    text = zh if language() == "zh" else en
    n = fields.get("n")
    if isinstance(n, int) and "s" not in fields:  # English plurals: "{n} turn{s}" reads "1 turn", "2 turns"
        fields["s"] = "" if n == 1 else "s"
    return text.format(**fields) if fields else text


GLOSSARY: dict[str, str] = {
    "确认需求": "clarify", "设定目标": "set the goal", "工作": "work", "判定": "verdict",
    "需求.md": "the requirement", "目标.md": "the goal", "问答记录.md": "the Q&A log", "交接": "handoff",
    "达成": "achieved", "未达成": "not achieved", "无法验证": "cannot be verified",
}
"""The names the reference fixes in Chinese, and what an English reader is told they mean."""

_LABEL = re.compile(r"(?P<step>[^#·]+)(?:·判定#(?P<judge>\d+))?(?:#round(?P<round>\d+))?(?:#retry(?P<retry>\d+))?")


def name(label: object) -> str:
    """A step name or attempt label (``工作``, ``工作·判定#1``, ``确认需求#retry1``) as the reference wrote it, with
    its meaning after it in English: ``工作·判定#1 (work, verdict 1)``. A name the reference does not fix (a
    workflow's own step) is the user's text and stays as written."""
    return str(label or "") if language() == "zh" else gloss(label)


def gloss(label: object) -> str:
    """``name`` in English whatever the reader's language (the API's ``step_label``)."""
    text = str(label or "")
    m = _LABEL.fullmatch(text)
    if m is None or m["step"] not in GLOSSARY:
        return text
    parts = [GLOSSARY[m["step"]]] + [f"{word} {m[key]}" for key, word in
                                     (("judge", "verdict"), ("round", "round"), ("retry", "retry")) if m[key]]
    return f"{text} ({', '.join(parts)})"


def doc(path: object) -> str:
    """A path to one of the reference's documents, glossed in English: ``…/需求.md (the requirement)``."""
    text = str(path)
    file = PurePath(text).name
    meaning = GLOSSARY.get(file) or (GLOSSARY["交接"] if file.startswith("交接-") else None)
    return text if language() == "zh" or meaning is None else f"{text} ({meaning})"


def verdict(word: object) -> str:
    """A judge's verdict word: ``达成`` in Chinese, ``achieved (达成)`` in English; another word stays as it is."""
    text = str(word or "").strip()
    meaning = GLOSSARY.get(text) if text in ("达成", "未达成", "无法验证") else None
    return text if language() == "zh" or meaning is None else f"{meaning} ({text})"


MESSAGES: dict[str, tuple[str, str]] = {
    # -- args: the parser, its help and its one-line mistakes ------------------------------------------
    "arg.unrecognized": ("unrecognized arguments: ", "不认识的参数:"),
    "arg.required": ("the following arguments are required: ", "缺少参数:"),
    "arg.one_value": ("expected one argument", "后面要跟一个值"),
    "arg.invalid_choice": ("invalid choice: ", "不认识的选项:"),
    "arg.see_help": (" (see {prog} --help)", "({prog} --help 看用法)"),
    "arg.want_int": ("wants a whole number, got {text!r}", "要一个整数,收到的是 {text!r}"),
    "arg.at_least": ("must be at least {minimum}, got {value}", "至少是 {minimum},收到的是 {value}"),
    "arg.want_seconds": ("wants seconds (0 = fully unattended), got {text!r}",
                         "要秒数(0 = 全自动,不等人),收到的是 {text!r}"),
    "arg.nan": ("wants seconds; nan is not a number of seconds", "要秒数,nan 不算"),
    "arg.want_dollars": ("wants an amount in dollars, got {text!r}", "要美元金额,收到的是 {text!r}"),
    "arg.positive_dollars": ("wants a dollar amount above 0, got {text}", "要大于 0 的美元金额,收到的是 {text}"),
    "help.usage": ("usage: ", "用法:"),
    "help.positionals": ("arguments", "参数"),
    "help.options": ("options", "选项"),
    "help.commands": ("subcommands", "子命令"),
    "help.help": ("show this help and exit", "显示这份帮助后退出"),
    "help.version": ("show the version and exit", "显示版本后退出"),
    "help.description": ("Run long-horizon coding agents on claude-agent-sdk. With no subcommand it is go: "
                         "flower \"make me an X\".",
                         "在 claude-agent-sdk 上跑长程编码 agent。不写子命令就是 go:flower \"帮我做一个 X\"。"),
    "help.epilog": ("Subcommand flags may sit before or after the ask; global flags (-w/-r/-v/-W/-T) anywhere. "
                    "The go flags (also `flower go --help`):",
                    "子命令的开关写在诉求前后都行;全局开关(-w/-r/-v/-W/-T)写在哪都行。go 的开关(也见 flower go --help):"),
    "help.workspace": ("the agent's working folder (default: the current one; created if missing)",
                       "agent 的工作目录(默认当前目录,不存在就建)"),
    "help.run_dir": ("where the session store and run manifest live (default <workspace>/runs; relative to the "
                     "current folder)", "会话库与运行清单的位置(默认 <工作目录>/runs;相对路径按当前目录算)"),
    "help.verbose": ("say more: subagent text, every tool result, prompts, the credentials in use (masked)",
                     "多打一些:subagent 正文、全部工具结果、prompt、生效的凭证(打码)"),
    "help.workbench": ("open a workbench (run/once; go always has its own)", "开工作台(run/once;go 总是带自己的工作台)"),
    "help.trim": ("on resume, swap old large tool results for file pointers (run/once; go trims by default, "
                  "--no-trim turns it off)", "resume 时把旧的大工具结果换成文件指针(run/once;go 默认就开,用 --no-trim 关)"),
    "help.go": ("one go: clarify → set the goal → dispatch the work, judged every round (the default)",
                "一键跑:问清需求 → 设定目标 → 派人干活,每轮独立判定(不写子命令时的默认)"),
    "help.go.description": ("Clarify → set the goal → work; after every round an independent judge says whether "
                            "it is done. Run it again in the same folder to continue. Global flags: flower --help.",
                            "问清需求 → 设定目标 → 干活,每轮由独立的判定者判\"做完了没有\"。同一个目录再跑一次就接着上次。"
                            "全局开关(-w/-r/-v/-W/-T)见 flower --help。"),
    "help.go.ask": ("the ask; without one it is asked at the terminal (or read from a pipe)",
                    "诉求;不给就在终端里问你(或者从管道读)"),
    "help.go.asks": ("question budget: negative = unlimited (default), 0 = no questions, N = a hard budget",
                     "提问额度:负数 = 不限(默认),0 = 不许提问,N = 硬额度"),
    "help.go.rounds": ("most work rounds in all (default 3); an independent judge checks each round and sends "
                       "it back if not achieved", "干活的总轮数上限(默认 3);每轮结束由独立判定者判,没达成就打回去接着做"),
    "help.go.no_goal": ("no goal guardian: no goal, no verdict, done when the work is done",
                        "关掉目标看守:不设目标、不判定,干完就算完"),
    "help.go.judge_can_run": ("let the judge run commands (a harder verdict, but it can change the workspace)",
                              "让判定者能跑命令(判定更硬,但它能改动工作区)"),
    "help.go.timeout": ("how long to wait for a person's answer (default 1800); 0 = fully unattended, questions "
                        "fall through at once; inf = wait forever",
                        "等人回答多久(默认 1800);0 = 全自动,提问立刻落空;inf = 一直等"),
    "help.go.isolate": ("a git worktree per subagent (the workspace must be a git repository); the workbench "
                        "moves outside it", "每个 subagent 分一份 git worktree(工作目录必须是 git 仓库);工作台挪到仓库外"),
    "help.go.window": ("the model's context window (default from the model name: 1M, haiku 200K); at window−50000 "
                       "a handoff is written and a new session takes over",
                       "模型上下文窗口(默认按模型名推断:100 万,haiku 20 万);到 窗口−50000 写交接书换新会话"),
    "help.go.no_handoff": ("no handoffs: fall back to the SDK's own compaction", "关掉换代,退回 SDK 自带的 compact"),
    "help.go.new": ("do not continue the last one: its brief/goal/lineage go to the archive (not deleted), "
                    "start over", "这次别接上次:上一段的需求/目标/血缘挪进存档(不删),从头开始"),
    "help.go.clarify_only": ("only clarify the requirement, do no work", "只问清需求,不往下干活"),
    "help.go.no_trim": ("no trimming (go trims by default)", "关掉裁剪(go 默认开)"),
    "help.instructions": ("domain instructions, added after the native system prompt", "领域指令,叠加在原生系统提示之后"),
    "help.run": ("run a workflow you wrote", "运行一个你写的 workflow"),
    "help.run.description": ("Run a workflow: module:attribute or file.py:attribute.",
                             "运行一个 workflow:模块:属性 或 文件.py:属性。"),
    "help.run.target": ("e.g. flows.py:main or mypkg.flows:build", "例如 flows.py:main 或 mypkg.flows:build"),
    "help.once": ("run one agent once (no flow, no verdict)", "跑一次单 agent(不走流程,不判定)"),
    "help.once.prompt": ("what to tell it", "给它的话"),
    "help.once.tools": ("comma-separated tool allowlist", "逗号分隔的工具白名单"),
    "help.once.permission_mode": ("the CLI's permission mode", "CLI 的权限模式"),
    "help.once.budget": ("a dollar budget cap", "美元预算上限"),
    "help.once.resume": ("continue an existing session", "接着一个已有的会话"),
    "help.once.fork": ("with --resume: fork instead of continuing", "和 --resume 一起用:分叉而不是接着"),
    "help.status": ("this folder's wake state (read-only, writes not a byte)", "看这个目录的唤醒状态(只读,一个字节都不写)"),
    "help.json": ("print JSON", "以 JSON 输出"),
    "help.status.isolate": ("the run used --isolate (the workbench is outside the repository)",
                            "这次运行用的是 --isolate(工作台在仓库外)"),
    "help.ask": ("a side question (\"where are we?\"), answered and forgotten, never in the run's context",
                 "旁路问答:问一句\"到哪了\",答完即弃,不进运行的上下文"),
    "help.ask.question": ("the question", "要问的话"),
    "help.setup": ("configure credentials (API key / gateway / model) in ~/.config/flower/.env",
                   "配置凭证(API key / 网关 / 模型),写到 ~/.config/flower/.env"),
    "help.completion": ("print a shell completion script: source <(flower completion bash)",
                        "打印 shell 补全脚本:source <(flower completion bash)"),
    "help.completion.shell": ("the shell to complete in", "为哪个 shell 补全"),
    "help.check": ("are credentials found (no network)", "看看能不能找到凭证(不联网)"),
    "help.check.guards": ("offline: prove through the CLI that every guard holds (✓/✗ per guard)",
                          "离线:通过 CLI 证明每个守卫都守得住(每个守卫 ✓/✗)"),
    "help.check.cli": ("with --guards: the Claude Code CLI to prove (default: the bundled one)",
                       "和 --guards 一起用:要证明的 Claude Code CLI(默认用自带的)"),
    "help.demo": ("the main job, offline: the service, a scripted model, clarify → goal → work → verdict → branch",
                  "离线看一遍主流程:服务、脚本模型、问清需求 → 目标 → 干活 → 判定 → 分支"),
    "help.demo.yes": ("answer the clarifier's question by itself after a few seconds", "几秒后自动回答需求确认者的提问"),
    "help.demo.keep": ("leave the service up afterwards, to explore (Ctrl-C stops it)", "跑完后服务别停,留着看(Ctrl-C 停)"),
    "help.demo.here": ("run the same flow in-process, without the service", "同样的流程在本进程里跑,不起服务"),
    # -- main ------------------------------------------------------------------------------------------
    "main.cancelled": ("cancelled", "已取消"),
    "main.crashed": ("something went wrong: {kind}: {error} (-v shows the whole traceback)",
                     "出错了:{kind}: {error}(加 -v 看完整的 traceback)"),
    # -- places ----------------------------------------------------------------------------------------
    "places.ws_unresolvable": ("cannot resolve the workspace {path}: {error}", "工作目录 {path} 解析不了:{error}"),
    "places.ws_not_dir": ("the workspace {path} is not a folder: -w must name a directory",
                          "工作目录 {path} 不是文件夹:-w 要指向一个目录"),
    "places.ws_missing": ("the workspace {path} does not exist", "工作目录 {path} 不存在"),
    "places.ws_cannot_create": ("cannot create the workspace {path}: {error}; pick another -w or create it first",
                                "建不了工作目录 {path}:{error};换个 -w,或者先把目录建好"),
    "places.ws_unreadable": ("cannot read the workspace {path}: {error}; check the permissions or pick another -w",
                             "工作目录 {path} 读不了:{error};看看权限,或者换个 -w"),
    "places.ws_unwritable": ("cannot write to the workspace {path}: check the permissions or pick another -w",
                             "工作目录 {path} 写不了:看看权限,或者换个 -w"),
    "places.rd_not_dir": ("the run dir {path} is not a folder: -r must name a directory",
                          "运行目录 {path} 不是文件夹:-r 要指向一个目录"),
    "places.rd_cannot_create": ("cannot create the run dir {path}: {error}; pick another -r",
                                "建不了运行目录 {path}:{error};换个 -r"),
    "places.rd_unwritable": ("cannot write to the run dir {path}: check the permissions or pick another -r",
                             "运行目录 {path} 写不了:看看权限,或者换个 -r"),
    # -- credentials -----------------------------------------------------------------------------------
    "creds.missing": ("no credentials: export ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN, or write it into ./.env or "
                      "~/.config/flower/.env (`flower setup` at a terminal writes it for you)",
                      "缺少凭证:把 ANTHROPIC_API_KEY 或 ANTHROPIC_AUTH_TOKEN export 进环境,或写进 ./.env 或 "
                      "~/.config/flower/.env(在终端里跑 `flower setup` 会帮你写)"),
    "creds.found": ("credentials found ({key})", "找到凭证了({key})"),
    "creds.not_yet": ("No credentials configured yet.", "还没配过凭证。"),
    "creds.again": ("Configuring again.", "重新配置。"),
    "creds.process_env": ("process environment", "进程环境"),
    "creds.file_head": ("# Written by `flower setup`. It holds credentials: never commit it.",
                        "# 由 `flower setup` 写。里面有凭证:别提交进版本库。"),
    "creds.title": ("== Configure flower ", "== 配置 flower "),
    "creds.where": ("The credentials go to {path} (readable only by you). Set once, used everywhere.\n",
                    "凭证会存到 {path}(只你可读)。装一次,处处生效。\n"),
    "creds.ask_token": ("1. Your API key or gateway token (Anthropic's sk-ant-… or one a third-party gateway issued)\n   > ",
                        "1. 你的 API key 或网关 token (Anthropic 官方的 sk-ant-… 或第三方网关签发的)\n   > "),
    "creds.no_token": ("No token given, cancelled.", "没给 token,取消。"),
    "creds.ask_base": ("\n2. Gateway URL (Enter = Anthropic's own; a third-party gateway: its BASE_URL)\n   > ",
                       "\n2. 网关地址 (直接回车 = Anthropic 官方;第三方网关填它的 BASE_URL)\n   > "),
    "creds.ask_model": ("\n3. Model name (Enter = the default; fill in if your gateway has its own names)\n   > ",
                        "\n3. 模型名 (直接回车 = 默认;网关有自己的模型名就填)\n   > "),
    "creds.cancelled": ("\ncancelled", "\n已取消"),
    "creds.saved": ("\n+ saved: {path}", "\n+ 存好了:{path}"),
    "setup.needs_terminal": ("flower setup needs a terminal; without one write {path} by hand (ANTHROPIC_API_KEY=…)",
                             "flower setup 要在终端里跑;不在终端就手写 {path}(ANTHROPIC_API_KEY=…)"),
    # -- check ---------------------------------------------------------------------------------------
    "check.no_creds": ("No Anthropic credentials found: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN / "
                       "CLAUDE_CODE_OAUTH_TOKEN) in one of: {looked}",
                       "没找到 Anthropic 凭证:在以下任一处设置 ANTHROPIC_API_KEY(或 ANTHROPIC_AUTH_TOKEN / "
                       "CLAUDE_CODE_OAUTH_TOKEN):{looked}"),
    "check.not_set": (" (not set)", "(没设)"),
    "check.guard.delegate": ("the coordinator's Write is denied", "协调者的 Write 被拦下"),
    "check.guard.worker": ("a worker's Write is allowed", "干活的子代理的 Write 放行"),
    "check.guard.spill": ("a big Bash output is spilled", "大段 Bash 输出落盘"),
    "check.guard.isolate": ("an isolated dispatch runs in its own git worktree", "隔离派出的子代理在自己的 git worktree 里跑"),
    "check.guard.settings": ("setting_sources=[] keeps project settings and CLAUDE.md out",
                             "setting_sources=[] 挡住了项目设置和 CLAUDE.md"),
    "check.guard.session": ("the CLI session ran", "CLI 会话跑起来了"),
    "check.guard.unknown": ("{name}", "{name}"),
    # -- run / once / status ---------------------------------------------------------------------------
    "run.want_target": ("needs module:attribute, e.g. flows:main", "需要 模块:属性 形式,例如 flows:main"),
    "run.no_file": ("cannot find {mod} (current folder {cwd}). A file path must exist; to import by module name "
                    "leave out .py", "找不到 {mod}(当前目录 {cwd})。给的是文件路径就要能对上;要按模块名导入就别带 .py"),
    "run.import_failed": ("importing '{name}' failed: {error}", "导入 '{name}' 失败:{error}"),
    "run.no_attr": ("'{name}' has no '{attr}'", "'{name}' 里没有 '{attr}'"),
    "run.call_failed": ("calling '{target}' failed: {error}", "调用 '{target}' 出错:{error}"),
    "run.not_workflow": ("'{target}' gives a {kind}, not a Workflow", "'{target}' 给出的不是 Workflow,而是 {kind}"),
    "once.fork_needs_resume": ("--fork goes with --resume SESSION_ID", "--fork 要和 --resume SESSION_ID 一起用"),
    "once.total": ("\ntotal ${cost:.4f} · session {session} · manifest {manifest}",
                   "\n总花费 ${cost:.4f} · 会话 {session} · 清单 {manifest}"),
    "once.failed": ("it did not work: {error}", "没成:{error}"),
    "once.unknown_error": ("unknown error", "未知错误"),
    "once.denied": ("every tool call was denied ({tools}) and nothing was produced: allow the tool with -t (e.g. "
                    "-t Read,Write) or a permission mode with -p acceptEdits",
                    "所有工具调用都被拒了({tools}),什么都没产出:用 -t 放行工具(比如 -t Read,Write),或者 -p acceptEdits"),
    "status.unreadable": ("cannot read the run state: {error}", "读不了运行状态:{error}"),
    "status.head": ("flower status · {ws} · run dir {rd}", "flower status · {ws} · 运行目录 {rd}"),
    "status.next": ("- running flower here would: {what}", "- 在这里跑 flower 会:{what}"),
    "status.continue": ("continue the last one (wake-up {n})", "接着上次(第 {n} 次唤醒)"),
    "status.fresh": ("start from the beginning (clarify first)", "从头开始(先问清需求)"),
    "status.done": ("nothing — it is done (the judge said achieved); `flower` offers to start something new",
                    "什么都不做 —— 已经做完了(判定:达成);`flower` 会问你要不要开始新的"),
    "status.never": ("- nothing ran here yet (no run dir)", "- 这里还没跑过(没有运行目录)"),
    # -- state snapshot --------------------------------------------------------------------------------
    "state.brief_ok": ("requirement confirmed: {path}", "需求已确认({path})"),
    "state.goal_line": ("  goal: {text}", "  目标:{text}"),
    "state.brief_missing": ("requirement not confirmed yet", "需求还没确认"),
    "state.brief_incomplete": (" (the brief is incomplete)", "(确认书不完整)"),
    "state.checks": ("goal: {n} check{s}{unverifiable}: {path}", "目标 {n} 条检查{unverifiable}({path})"),
    "state.unverifiable": (" ({n} of them cannot be verified here)", "(其中 {n} 条此环境无法验证)"),
    "state.sessions": ("sessions: {list}", "会话:{list}"),
    "state.woke": ("ran here {n} time{s}", "这里跑过 {n} 次"),
    "state.last_run": ("last run {run}: {n} step{s}, ${cost:.4f}", "上次运行 {run}:{n} 步,${cost:.4f}"),
    "state.handoff": ("handoff {path}", "交接书 {path}"),
    "state.done": ("done: the judge said achieved ({when})", "已完成:判定为达成({when})"),
    # -- go --------------------------------------------------------------------------------------------
    "go.empty_ask": ("the ask is empty. Run `flower` and type it at the prompt, or flower \"make me an X\".",
                     "诉求是空的。直接 `flower` 然后按提示输入,或者 flower \"帮我做一个 X\"。"),
    "go.fresh_prompt": ("What shall we make? One sentence is enough; Enter starts (Ctrl-C quits)",
                        "要做什么? 一句话就够,回车开始(Ctrl-C 退出)"),
    "go.wake_prompt": ("Continue the last one? Enter = continue; or say something new; /new = start something "
                       "else (Ctrl-C quits)", "接着上次? 直接回车 = 接着做;也可以说点新的;/new = 重开一件事(Ctrl-C 退出)"),
    "go.done_prompt": ("This job is done: the judge said achieved. Enter or /new = start something new; /continue = "
                       "continue anyway (more paid rounds); or say what to add (Ctrl-C quits)",
                       "这件事已经做完了:判定为达成。回车或 /new = 开始新的;/continue = 仍然接着做(会再花钱跑几轮);"
                       "或者说要补充什么(Ctrl-C 退出)"),
    "go.done_piped": ("this job is done (the judge said achieved): give a new ask, or --new to start over",
                      "这件事已经做完了(判定为达成):给一句新的诉求,或者加 --new 从头开始"),
    "go.isolate_needs_git": ("--isolate needs {path} to be a git repository (each subagent gets its own worktree). "
                             "git init first, or drop --isolate.",
                             "--isolate 要求 {path} 是 git 仓库(每个 subagent 要分一份 worktree)。先 git init,或者去掉 --isolate。"),
    "go.state_unreadable": ("cannot read the last run's state: {error}", "读不了上次的运行状态:{error}"),
    "go.no_tty": ("! stdin is not a terminal, nobody can answer questions: once the input ends they fall through "
                  "to its own judgement. Unattended? add --timeout 0",
                  "! 标准输入不是终端,没人能回答提问:输入一结束,提问就让它自己判断。无人值守就加 --timeout 0"),
    "go.banner": ("<- continuing the last one in {ws}  {bits}", "<- 在 {ws} 接上上次  {bits}"),
    "go.banner.brief": ("requirement confirmed", "需求已确认"),
    "go.banner.checks": ("goal: {n} check{s}", "目标 {n} 条"),
    "go.banner.context": ("work context {k}", "干活上下文 {k}"),
    "go.banner.woke": ("wake-up {n}", "第 {n} 次唤醒"),
    "go.done": ("+ done · {brief}", "+ 完成 · 需求 {brief}"),
    "go.clarified": ("+ requirement confirmed · {brief}", "+ 需求已确认 · 需求 {brief}"),
    "go.goal_path": (" · {goal}", " · 目标 {goal}"),
    # -- drive -----------------------------------------------------------------------------------------
    "drive.signal": ("! got {sig}: the step in flight is recorded in {manifest}", "! 收到 {sig}:在途的步骤已记进 {manifest}"),
    "drive.quit": ("quit (the step in flight is recorded in the manifest)", "已退出(在途的步骤已记进清单)"),
    "drive.total": ("\ntotal ${cost:.4f} · manifest {manifest}", "\n总花费 ${cost:.4f} · 清单 {manifest}"),
    "drive.not_passed": ("did not pass its check", "没通过检查"),
    "drive.creds_hint": (" (looks like the credentials are wrong: `flower setup` to reconfigure, or check "
                         "ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL)",
                         "(看起来是凭证不对:跑 `flower setup` 重配,或者检查 ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL)"),
    "drive.stopped": ("stopped at step '{step}': {why}", "在步骤 '{step}' 中止:{why}"),
    # -- console ---------------------------------------------------------------------------------------
    "console.answer": ("your answer (Enter = skip, let it decide) > ", "你的回答 (回车=跳过,让它自己判断) > "),
    "console.idle": ("(type = add to the requirement, delivered at the next checkpoint; ? first = a side question "
                     "that does not disturb it) > ", "(直接说 = 加需求,下个检查点送达;? 开头 = 顺便问一句,不打扰它干活) > "),
    "console.interrupt": ("what do you want to say (Enter = just interrupt, carry on) > ",
                          "要说什么 (直接回车 = 只打断,接着跑) > "),
    "console.quit": ("! Ctrl-C again: quitting", "! 再按了一次 Ctrl-C:退出"),
    "console.interrupting": ("! interrupting this round: say something and press Enter, it carries on with your "
                             "words. A running subagent loses its half-done work. (Ctrl-C again = quit)",
                             "! 要打断这一轮:说句话再回车,它会带着你的话接着干。正在跑的 subagent 会丢掉半成品。"
                             "(再按一次 Ctrl-C = 退出)"),
    "console.still_waiting": ("  ({n} question{s} still open; the interrupt does not touch them)",
                              "  (有 {n} 个提问还等着,打断不影响它们)"),
    "console.bad_line": ("x could not handle that line: {error}", "x 没处理好这行输入:{error}"),
    "console.interrupted": ("! interrupted this round", "! 已打断这一轮"),
    "console.interrupted_with": (", carrying on with your words: {text}", ",带着你的话接着干:{text}"),
    "console.interrupted_plain": (", carrying on", ",接着跑"),
    "console.interrupted_when": (" (at the next message boundary)", "(在下一个消息边界生效)"),
    "console.no_channel": ("! this flow has no question channel, it cannot hear you (? first asks aside)",
                           "! 这个流程没有提问通道,收不到你的话(? 开头可以问旁路)"),
    "console.draining": ("(waiting for {n} side answers to finish…)", "(等 {n} 条旁路问答收尾…)"),
    # -- oracle ----------------------------------------------------------------------------------------
    "oracle.state_unreadable": ("! cannot read the run state: {error}", "! 读不了运行状态:{error}"),
    "oracle.failed": ("x the side question failed: {error}", "x 旁路问答失败:{error}"),
    "oracle.no_answer": ("no answer", "没有回答"),
    "oracle.head": ("# aside", "# 旁路"),
    "oracle.empty": ("(empty)", "(空)"),
    "oracle.live": ("did not disturb the running run", "没有打扰正在跑的运行"),
    "oracle.after": ("never entered that run's context", "没有进入那次运行的上下文"),
    "oracle.tail": ("  (${cost:.4f}, {tail})", "  (${cost:.4f},{tail})"),
    "oracle.want_question": ("ask something, e.g. flower ask \"where are we?\"", "要问点什么,例如 flower ask \"到哪一步了?\""),
    "oracle.never_ran": ("flower never ran in {ws} (no {rd}): nothing to ask about",
                         "{ws} 这里还没跑过 flower(没有 {rd}):没什么可问的"),
    # -- screen ----------------------------------------------------------------------------------------
    "screen.skipped": (". {step} — already there, skipped", ". {step} —— 已经有了,跳过"),
    "screen.resumed": ("<- continuing the last session", "<- 接着上次的会话"),
    "screen.more_lines": ("…({n} more line{s}, -v shows them all)", "…(还有 {n} 行,-v 看全部)"),
    "screen.interrupt_words": ("! interrupted, with your words: {words}", "! 打断了,你说:{words}"),
    "screen.interrupt_plain": ("! interrupted, without words: it carries on", "! 打断了,没留话:它接着干"),
    "screen.call_interrupted": ("~ {tool} interrupted (not a failure)", "~ {tool} 被打断(不是失败)"),
    "screen.inbox": ("* checks the inbox", "* 查收件箱"),
    "screen.dispatch": ("> dispatched to {who}: {what}", "> 派给 {who}:{what}"),
    "screen.report": ("<- the report came back: {gist}", "<- 报告交回来了:{gist}"),
    "screen.compacted": ("# the context was compacted", "# 上下文被压缩了"),
    "screen.compacted_sizes": ("# the context was compacted ({pre} → {post})", "# 上下文被压缩了({pre} → {post})"),
    "screen.mail": ("+ received (it sees it the next time it checks its inbox; {where})",
                    "+ 收到 (它下次查收件箱时会看到;{where})"),
    "screen.mail_saved": ("added to the brief", "已追加进确认书"),
    "screen.mail_unsaved": ("no brief to keep it in — it may not outlive the next step",
                            "没有确认书可落盘 —— 它可能活不过下一个步骤"),
    "screen.asks_left": ("     ({n} question{s} left)", "     (还能问 {n} 次)"),
    "screen.empty_reply": ("(empty reply)", "(空回复)"),
    "screen.unattended": ("  ! nobody is watching (--timeout 0) — it decides itself and writes the assumption "
                          "into its unknowns", "  ! 没人值守(--timeout 0)—— 它自己判断,把假设记进「未知与假设」"),
    "screen.no_answer": ("  ! no answer — it decides itself and writes the assumption into its unknowns",
                         "  ! 无人应答 —— 它会自己判断,把假设记进「未知与假设」"),
    "screen.over_budget": ("  ! no questions left — it decides itself", "  ! 提问额度用完 —— 它会自己判断"),
    "screen.declined": ("  . skipped — it decides itself", "  . 已跳过 —— 它会自己判断"),
    "screen.declined_why": ("  . skipped ({why}) — it decides itself", "  . 已跳过({why}) —— 它会自己判断"),
    "screen.invalid": ("  x the question is empty; it has to say what it wants to know",
                       "  x 问题是空的,让它写清楚再问"),
    "screen.near": ("# context {used}, close to the handoff line {at}", "# 上下文 {used},快到交接线 {at}"),
    "screen.writing": ("# the context is full — writing a handoff for a new session", "# 上下文满了 —— 写交接书准备换代"),
    "screen.degraded": ("x the handoff was not written, a degraded one is used — the next session looks for itself",
                        "x 交接没写成,用了降级版本 —— 接手的人会自己去现场看"),
    "screen.handoff_at": ("<- the handoff is in {path}", "<- 交接写在 {path}"),
    "screen.new_session": ("<- a new session takes over, its context starts afresh", "<- 新会话接手,上下文从头开始"),
    "screen.judging": ("- {label}: an independent verdict on this round (a new session that did not work on it)",
                       "- {label}:独立判定这一轮(新会话,没参与干活)"),
    "screen.round": ("- {label}: not achieved, another round in the same session",
                     "- {label}:没达成,接着同一个会话再干一轮"),
    "screen.retry": ("- {label}: once more", "- {label}:重来一次"),
    "screen.turns": ("{n} turn{s}", "{n} 轮"),
    "screen.context": ("context {k}", "上下文 {k}"),
    "screen.attempts": ("tried {n} time{s}", "试了 {n} 次"),
    "screen.retired": ("{n} handoff{s}", "换代 {n} 次"),
    "screen.total": ("total ${cost:.4f}", "累计 ${cost:.4f}"),
    "screen.step_failed": ("x {step} did not work: {error} · {bits}", "x {step} 没成:{error} · {bits}"),
    "screen.thinking": ("{label} · {elapsed:.0f}s", "{label} · {elapsed:.0f} 秒"),
    "screen.thinking_context": ("{label} · {elapsed:.0f}s · context {k}", "{label} · {elapsed:.0f} 秒 · 上下文 {k}"),
    "screen.waiting_model": ("waiting for the model", "等模型回复"),
    "screen.step_head": ("== {step} · step {i} of {n} ", "== {step} ({i}/{n}) "),
    "screen.retry_wait": ("attempt {n} failed, retrying in {delay:.0f}s", "第 {n} 次失败,{delay:.0f}s 后重试"),
    "screen.retry_why": (": {why}", ":{why}"),
    "screen.guard": ("  ! guard stopped {who}'s {tool}: {why}", "  ! 守卫拦下了 {who} 的 {tool}:{why}"),
    "screen.guard_a_call": ("tool call", "工具调用"),
    # -- guards: what a denial means (the guard's own sentence is the model's, in Chinese) -----------
    "guard.whitelist": ("{role} has no {tool}, by design (not a missing setting)",
                        "{role} 没有 {tool},这是有意的设计,不是配置遗漏"),
    "guard.delegate": ("the coordinator does not do the work itself: {tool} is left to a subagent it dispatches",
                       "协调者不亲自动手:{tool} 留给它派出的子代理"),
    "guard.isolation": ("isolation failed: {role} must run in its own git worktree, not the shared checkout",
                        "隔离失败:{role} 应在独立的 git worktree 里运行,而不是共享检出"),
    "guard.other": ("the {guard} guard refused {tool} (its words to the model: --json)",
                    "守卫 {guard} 拒绝了 {tool}(它对模型说的话:--json)"),
    # -- remote: flower remote, its help, its lines and the client's errors ----------------------------
    "help.remote": ("drive runs on a flower service: submit, follow, answer, list, show, diff, cancel, logs",
                    "操作 flower 服务上的运行:提交、跟看、回答、列出、查看、差异、取消、日志"),
    "help.remote.description": ("Drive runs on a flower service: submit, follow, answer, list, show, diff, cancel, "
                                "logs; for scripts answer, message, interrupt, delete. Config: --server/--token, "
                                "FLOWER_SERVER/FLOWER_TOKEN, or ~/.config/flower/remote.toml (written by `flower "
                                "remote login`). A run goes by its short id (`list` shows it; 4 of its characters "
                                "are enough when they are unique), `last` (your newest), or its whole id.",
                                "操作 flower 服务上的运行:提交、跟看、回答、列出、查看、差异、取消、日志;给脚本用的"
                                "回答、发消息、打断、删除。配置:--server/--token,或 FLOWER_SERVER/FLOWER_TOKEN,或 "
                                "~/.config/flower/remote.toml(由 `flower remote login` 写)。运行可以用简称(`list` "
                                "里有;不重复时写 4 个字符就够)、`last`(你最新的那个)或完整 id 来指。"),
    "help.remote.exit_status": ("exit status: 0 done (the run succeeded, or you stopped following), 1 the run did "
                                "not succeed or the service said no, 2 a usage mistake, {code} `submit` without a "
                                "terminal: the run asked a question (printed) and nobody here can answer it (--wait "
                                "waits instead).",
                                "退出码:0 完成(运行成功,或你不再跟看),1 运行没有成功或服务拒绝,2 用法有误,{code} 没有终端时"
                                "的 `submit`:运行提了问题(已打印),这里没人能回答(--wait 则一直等)。"),
    "help.remote.wait": ("without a terminal, wait for its questions to be answered elsewhere (web page, API) "
                         "instead of printing the first one and exiting {code}",
                         "没有终端时,等别处(网页、API)回答它的问题,而不是打印第一个问题后以 {code} 退出"),
    "help.remote.json": ("JSON output ({verbs})", "以 JSON 输出({verbs})"),
    "help.remote.server": ("the service, e.g. http://127.0.0.1:8080", "服务地址,例如 http://127.0.0.1:8080"),
    "help.remote.token": ("your tenant token", "你的租户 token"),
    "help.remote.login": ("check the server and token, then save them to ~/.config/flower/remote.toml",
                          "检查服务地址和 token,然后存到 ~/.config/flower/remote.toml"),
    "help.remote.submit": ("submit an ask and follow the run live (answer questions at the prompt)",
                           "提交一个诉求并实时跟着看(在提示符处回答提问)"),
    "help.remote.ask": ("what you want done", "要做什么"),
    "help.remote.rounds": ("work rounds at most", "干活轮数上限"),
    "help.remote.asks": ("questions it may ask at most", "最多能问几次"),
    "help.remote.timeout": ("how long a question waits", "一个提问等多久"),
    "help.remote.no_goal": ("no goal and no judge", "不设目标,不判定"),
    "help.remote.options": ("more run options, as a JSON object", "更多运行选项,写成一个 JSON 对象"),
    "help.remote.detach": ("print the run id and return at once", "打印运行 id 后立刻返回"),
    "help.remote.attach": ("follow a run live (interactive), from its first event", "从第一条事件起实时跟着一个运行(可交互)"),
    "help.remote.list": ("your runs, newest first", "你的运行,最新的在前"),
    "help.remote.status": ("only these statuses (comma-separated)", "只看这些状态(逗号分隔)"),
    "help.remote.run": ("the run: its short id (`flower remote list` shows it), `last` (your newest), or its whole id",
                        "哪个运行:它的简称(`flower remote list` 里有)、`last`(你最新的那个),或完整 id"),
    "help.remote.answer": ("answer the run's oldest open question (for scripts; --question picks another)",
                           "回答运行最早的一个待答问题(给脚本用;--question 指定别的)"),
    "help.remote.answer_text": ("the answer, or an option's number; none = let it decide; - = read stdin",
                                "回答,或选项的编号;不给 = 让它自己判断;- = 从标准输入读"),
    "help.remote.question": ("the id of the question to answer (`flower remote show` lists them)",
                             "要回答的问题 id(`flower remote show` 会列出)"),
    "help.remote.message": ("tell a running run something; it reads it between tool calls",
                            "给运行中的运行发一句话;它在工具调用之间读"),
    "help.remote.words": ("the words; - = read stdin", "要说的话;- = 从标准输入读"),
    "help.remote.interrupt": ("cut the run's turn where it is; it carries on from your words",
                              "在当前位置打断运行这一轮;它带着你的话接着干"),
    "help.remote.interrupt_words": ("what it should carry on with (none: just carry on); - = read stdin",
                                    "它接着干时要听的话(不给:直接接着干);- = 从标准输入读"),
    "help.remote.delete": ("delete an ended run's files (its branch stays unless --branch)",
                           "删掉一个已结束运行的文件(分支保留,除非 --branch)"),
    "help.remote.delete_branch": ("delete its branch flower/<run> too", "连它的分支 flower/<run> 一起删"),
    "help.remote.show": ("one run: status, step, cost, branch, changed files, open questions",
                         "一个运行:状态、步骤、花费、分支、改动的文件、没回答的提问"),
    "help.remote.diff": ("the run's diff against its base (its last checkpoint while live)",
                         "运行相对基线的差异(还在跑时是它最近的检查点)"),
    "help.remote.files": ("only the files it changed, with lines added and deleted", "只列改动的文件,带增删行数"),
    "help.remote.path": ("only this file's diff (a path --files lists)", "只看这个文件的差异(--files 列出的路径)"),
    "help.remote.cancel": ("stop a run (waits until it has ended)", "停掉一个运行(等到它结束)"),
    "help.remote.logs": ("the run's events so far, drawn as in the terminal (-f: until it ends)",
                         "运行到目前为止的事件,按终端的样子画出来(-f:一直到结束)"),
    "help.remote.follow": ("keep streaming until the run ends", "一直跟到运行结束"),
    "help.remote.json_lines": ("one JSON event per line", "每行一条 JSON 事件"),
    "remote.needs_action": ("flower remote needs one of: {actions} (flower remote --help)",
                            "flower remote 后面要跟其中一个:{actions}(flower remote --help 看用法)"),
    "remote.in_the_clear": ("warning: {url} is plain http to another machine, so the tenant token crosses the "
                            "network readable; use https",
                            "警告:{url} 是到另一台机器的明文 http,租户 token 会以可读的形式经过网络;请用 https"),
    "remote.ask_server": ("service URL: ", "服务地址:"),
    "remote.ask_token": ("tenant token: ", "租户 token:"),
    "remote.signed_in": ("signed in to {server} ({runs}); saved to {path}", "已登录 {server}({runs});已存到 {path}"),
    "remote.no_runs_yet": ("no runs yet", "还没有运行"),
    "remote.runs_found": ("runs found", "有运行"),
    "remote.options_not_json": ("--options is not JSON ({why}): write an object, e.g. '{{\"rounds\": 2}}'",
                                "--options 不是 JSON({why}):写成一个对象,例如 '{{\"rounds\": 2}}'"),
    "remote.options_not_object": ("--options must be a JSON object, e.g. '{{\"rounds\": 2}}'",
                                  "--options 必须是一个 JSON 对象,例如 '{{\"rounds\": 2}}'"),
    "remote.blank_ask": ("the ask is blank: say what you want done", "诉求是空的:说说要做什么"),
    "remote.submitted": ("- run {run} submitted to {server} ({status}; `{short}` for short); Ctrl-C interrupts, "
                         "twice stops following",
                         "- 运行 {run} 已提交到 {server}({status};简称 `{short}`);Ctrl-C 打断,按两次不再跟看"),
    "remote.attached": ("- run {run} ({status}) on {server}", "- 运行 {run}({status}),在 {server}"),
    "remote.no_terminal": ("! not at a terminal: nobody here answers its questions (answer them in the web page, or "
                           "with `flower remote attach {run}` at a terminal)",
                           "! 不在终端里:这里没人回答它的提问(到网页上回答,或在终端里跑 `flower remote attach {run}`)"),
    "remote.changed_files": (" · {n} file{s} changed on {branch} (flower remote diff {run})",
                             " · 分支 {branch} 上改了 {n} 个文件(flower remote diff {run})"),
    "remote.ended": ("{mark} run {run} {status}{why} · ${cost:.4f}{tail}",
                     "{mark} 运行 {run} {status}{why} · ${cost:.4f}{tail}"),
    "remote.none": ("no runs yet (flower remote submit \"...\")", "还没有运行(flower remote submit \"……\")"),
    "remote.cancel_requested": (" (cancel requested)", "(已请求取消)"),
    "remote.field.run": ("run", "运行"),
    "remote.field.short": ("short", "简称"),
    "remote.field.waiting": ("waiting", "在等"),
    "remote.field.status": ("status", "状态"),
    "remote.field.ask": ("ask", "诉求"),
    "remote.field.step": ("step", "步骤"),
    "remote.field.cost": ("cost", "花费"),
    "remote.field.events": ("events", "事件"),
    "remote.field.branch": ("branch", "分支"),
    "remote.field.fired": ("fired by", "由谁启动"),
    "remote.field.base": ("base", "基线"),
    "remote.field.commit": ("commit", "提交"),
    "remote.field.created": ("created", "创建"),
    "remote.field.started": ("started", "开始"),
    "remote.field.ended": ("ended", "结束"),
    "remote.field.error": ("error", "错误"),
    "remote.field.changed": ("changed", "改动"),
    "remote.field.question": ("question", "提问"),
    "remote.field.parked": ("parked", "停放"),
    "remote.field.resumed": ("resumed", "续跑"),
    "remote.field.lost": ("lost", "丢失"),
    "remote.binary": ("binary", "二进制"),
    "remote.more_files": ("(more files than listed: git fetch <your repository> {branch})",
                          "(改动的文件比列出的多:git fetch <你的仓库> {branch})"),
    "remote.unchanged": ("run {run} changed nothing (yet)", "运行 {run} (还)没有改动"),
    "remote.nothing_asked": ("run {run} has no open question: nothing to answer (`flower remote show {run}` says "
                             "what it is doing)", "运行 {run} 没有待答的问题:没什么可回答的(`flower remote show {run}` "
                             "看它在做什么)"),
    "remote.no_such_question": ("run {run} has no open question {question}: `flower remote show {run}` lists the open "
                                "ones", "运行 {run} 没有待答的问题 {question}:`flower remote show {run}` 会列出待答的"),
    "remote.answered": ("+ answered run {run}'s question \"{question}\": {answer}",
                        "+ 已回答运行 {run} 的问题“{question}”:{answer}"),
    "remote.empty_answer": ("(nothing: it decides for itself)", "(没说:它自己判断)"),
    "remote.blank_message": ("the message is blank: say something, or - to read it from stdin",
                             "消息是空的:说点什么,或用 - 从标准输入读"),
    "remote.messaged": ("+ sent to run {run} (it reads its inbox between tool calls)",
                        "+ 已发给运行 {run}(它在工具调用之间查收件箱)"),
    "remote.interrupted": ("! interrupted run {run}", "! 已打断运行 {run}"),
    "remote.interrupted_with": (", it carries on with your words: {text}", ",它带着你的话接着干:{text}"),
    "remote.deleted": ("- run {run} deleted (its events, manifest and folder)", "- 运行 {run} 已删除(事件、清单和目录)"),
    "remote.kept_branch": ("; its branch {branch} stays", ";分支 {branch} 保留"),
    "remote.deleted_branch": ("; its branch {branch} too", ";分支 {branch} 也删了"),
    "remote.cancelled": ("run {run} {status}", "运行 {run} {status}"),
    "remote.stopping": (" (stopping; flower remote show to check)", "(正在停;用 flower remote show 查看)"),
    "remote.result": ("{mark} {step} · ${cost:.4f} · {n} turn{s} · total ${total:.4f}",
                      "{mark} {step} · ${cost:.4f} · {n} 轮 · 累计 ${total:.4f}"),
    "remote.checkpoint": ("  # work handed back ({commit})", "  # 成果已交回({commit})"),
    "remote.verify": ("  {mark} the team's check: {summary}", "  {mark} 团队的检查:{summary}"),
    "remote.sandbox_started": ("- sandbox started", "- 沙箱已启动"),
    "remote.killed": ("x the run's sandbox was stopped", "x 运行的沙箱被停掉了"),
    "remote.resumed": ("~ resumed in a new sandbox: {why}", "~ 在新沙箱里接着跑:{why}"),
    "remote.resumed.crashed": ("its sandbox crashed", "沙箱崩溃了"),
    "remote.resumed.vanished": ("its sandbox vanished", "沙箱不见了"),
    "remote.resumed.killed": ("its engine stopped its sandbox", "引擎停掉了沙箱"),
    "remote.resumed.unparked": ("it was parked while it waited, and woken", "等人时交还了沙箱,现在被唤醒"),
    "remote.parked_since": ("since {at}: no sandbox until it is answered", "自 {at} 起:回答之前不占沙箱"),
    "remote.resumed_times": ("{n}×", "{n} 次"),
    "remote.questions_unreadable": ("x cannot read the open questions: {error}", "x 读不了没回答的提问:{error}"),
    "remote.what.answer": ("the answer", "回答"),
    "remote.what.message": ("the message", "消息"),
    "remote.what.interrupt": ("the interrupt", "打断"),
    "remote.sent": ("+ sent (it reads its inbox at the next checkpoint)", "+ 已发送(它在下个检查点查收件箱)"),
    "remote.not_delivered": ("x {what} did not reach the run: {error}", "x {what}没送到运行:{error}"),
    "remote.stopped_following": ("- stopped following; run {run} goes on (flower remote attach {run})",
                                 "- 不再跟看;运行 {run} 继续(flower remote attach {run})"),
    "remote.err.no_server": ("no service URL: pass --server, set FLOWER_SERVER, or run `flower remote login`",
                             "没有服务地址:加 --server,或设 FLOWER_SERVER,或跑 `flower remote login`"),
    "remote.err.no_token": ("no tenant token: pass --token, set FLOWER_TOKEN, or run `flower remote login`",
                            "没有租户 token:加 --token,或设 FLOWER_TOKEN,或跑 `flower remote login`"),
    "remote.err.unreachable": ("cannot reach the service at {server}: {error}", "连不上 {server} 的服务:{error}"),
    "remote.err.refused_token": ("the service refused the token: check it, or ask the operator for yours",
                                 "服务拒绝了这个 token:检查一下,或向运维要你的 token"),
    "remote.err.answered": ("the service answered {code} {reason}: {body}", "服务回答 {code} {reason}:{body}"),
    "remote.err.diff_cut": ("the diff of run {run} was cut short: {error}", "运行 {run} 的差异没传完:{error}"),
    "remote.err.diff_unreadable": ("cannot read the diff of run {run} from {server}: {error}",
                                   "从 {server} 读不了运行 {run} 的差异:{error}"),
    "remote.err.stream_drops": ("the event stream of run {run} keeps dropping: {error}",
                                "运行 {run} 的事件流一直断:{error}"),
    "remote.err.stream_closes": ("the event stream of run {run} keeps closing before the run ends",
                                 "运行 {run} 的事件流总在运行结束前关闭"),
    "remote.err.url_unreadable": ("the service URL {url} cannot be read: write it as http(s)://host:port",
                                  "服务地址 {url} 读不懂:写成 http(s)://主机:端口"),
    "remote.err.url_userinfo": ("the service URL carries a user name or password (user:pass@): take them out and "
                                "give the tenant token instead (--token, FLOWER_TOKEN or `flower remote login`)",
                                "服务地址里带了用户名或密码(user:pass@):去掉它们,改给租户 token(--token、"
                                "FLOWER_TOKEN 或 `flower remote login`)"),
    "remote.err.url_scheme": ("the service URL {url} is not http(s)://host[:port]: write it that way",
                              "服务地址 {url} 不是 http(s)://主机[:端口] 的形式:照这个写"),
    "remote.err.config_unreadable": ("{path} cannot be read ({error}): fix it, or write it again with "
                                     "`flower remote login`", "{path} 读不了({error}):修好它,或用 `flower remote login` 重写"),
    # -- the commit of a service run's work (sandbox/entrypoint.py) ---------------------------------------
    "commit.step": ("flower run {run}: the work up to step {step}", "flower 运行 {run}:到步骤 {step} 为止的成果"),
    "commit.end": ("flower run {run}: its work at the end", "flower 运行 {run}:结束时的成果"),
    "commit.stopped": ("flower run {run}: its work when it was stopped", "flower 运行 {run}:被停下时的成果"),
    "commit.periodic": ("flower run {run}: its work so far, during step {step}",
                        "flower 运行 {run}:步骤 {step} 进行中的成果"),
    # -- demo ------------------------------------------------------------------------------------------
    "demo.title": ("flower demo — the main job, offline: a service, a team's repository, a scripted model",
                   "flower demo —— 离线看一遍主流程:一个服务、一个团队的仓库、一个脚本模型"),
    "demo.ask": ("Add a greeting script to this project", "给这个项目加一个打招呼的脚本"),
    "demo.question": ("Which language should the greeting script be in?", "打招呼的脚本用什么语言写?"),
    "demo.starting": ("- starting the service (data in {data}, local backend, SQLite)",
                      "- 启动服务(数据在 {data},本地后端,SQLite)"),
    "demo.no_service": ("the service needs its extras: pip install -e '.[service]' (or flower demo --here runs "
                        "without it)", "服务要装它的依赖:pip install -e '.[service]'(或者 flower demo --here 不用服务)"),
    "demo.service_failed": ("the service did not start: {why}", "服务没起来:{why}"),
    "demo.listening": ("- the service listens on {url} — the web page: {url}/", "- 服务在 {url} —— 网页:{url}/"),
    "demo.tenant": ("- tenant \"demo\": repository {repo} (a small sample project); its model is the built-in "
                    "scripted one", "- 租户 \"demo\":仓库 {repo}(一个小示例项目);它的模型是内置的脚本模型"),
    "demo.submitted": ("- POST /v1/runs → run {run}; following it live", "- POST /v1/runs → 运行 {run};实时跟着看"),
    "demo.auto_answer": ("  (--yes: answering \"{answer}\" in {s} s)", "  (--yes:{s} 秒后自动回答 \"{answer}\")"),
    "demo.status": ("- run {run}: {status}", "- 运行 {run}:{status}"),
    "demo.branch": ("- the work is on branch {branch} of {repo} (base {base})", "- 成果在 {repo} 的分支 {branch} 上(基于 {base})"),
    "demo.diffstat": ("- diffstat:", "- 改动统计:"),
    "demo.diff": ("- the diff:", "- 差异:"),
    "demo.kept": ("- the service stays up on {url} (token {token}); Ctrl-C stops it", "- 服务留在 {url}(token {token});Ctrl-C 停"),
    "demo.done": ("+ demo done in {s:.1f} s", "+ 演示完成,用时 {s:.1f} 秒"),
    "demo.failed": ("the demo run ended {status}: {why}", "演示运行结束于 {status}:{why}"),
    "demo.here": ("- in-process (--here): no service, the flow runs right here in {ws}", "- 本进程(--here):不起服务,流程就在这里跑,工作区 {ws}"),
    "demo.here_work": ("- the work is in the working tree of {repo} (base {base}; --here makes no branch)",
                       "- 成果在 {repo} 的工作区里(基于 {base};--here 不建分支)"),
    # -- issue 24: answers by number, flags where people put them, the demo to explore -----------------------
    "console.no_such_option": ("there is no option {n}: type a number from 1 to {count}, or the answer in words",
                               "没有第 {n} 项:输入 1 到 {count} 之间的编号,或者直接写回答"),
    "remote.json_where": ("--json is for {verbs}; `flower remote {verb}` has no JSON output",
                          "--json 只用于 {verbs};`flower remote {verb}` 没有 JSON 输出"),
    "remote.no_tty_exit": ("nobody at a terminal here to answer it: answer in the web page, with "
                           "`flower remote attach {run}` at a terminal, or submit with --wait to wait for an answer "
                           "(exit {code})",
                           "这里没有终端,没人能回答:去网页回答,或在终端里 `flower remote attach {run}`,"
                           "或加 --wait 提交以等别人回答(退出码 {code})"),
    "demo.explore": ("- ask it anything else: flower remote --server {url} --token {token} submit \"your ask\" "
                     "(its scripted model answers any ask with the starter flow)",
                     "- 随便再问点别的:flower remote --server {url} --token {token} submit \"你的诉求\"(脚本模型对任何诉求都走一遍起步流程)"),
    "demo.any_question": ("Shall I do it just as you asked it?", "就按你说的原样去做吗?"),
}

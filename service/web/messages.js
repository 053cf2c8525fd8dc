// Every word the page says, in English and in Chinese — the page's copy of flower/cli/messages.py's way.
// The language: ?lang=zh or ?lang=en, else the browser's (navigator.language starting with "zh"), else English.
// The names the reference fixes in Chinese (step names, document titles, verdict words) stay as written; in
// English they carry a gloss: "工作 (work)", "achieved (达成)". A guard's sentence is the model's: in English the
// page says what it means, the sentence itself stays in the event stream.
"use strict";

const LANG = (() => {
  const asked = new URLSearchParams(location.search).get("lang") || "";
  const pick = asked || navigator.language || "";
  return pick.toLowerCase().startsWith("zh") ? "zh" : "en";
})();

const MESSAGES = {
  "page.signout": ["Sign out", "退出"],
  "page.signin": ["Sign in", "登录"],
  "page.signin_help": ["Your tenant token (from the operator). It stays in this browser tab only, never on disk.",
                       "你的租户 token(向运维要)。它只留在这个浏览器标签页里,不写盘。"],
  "page.token": ["tenant token", "租户 token"],
  "page.new_run": ["New run", "新运行"],
  "page.new_ask": ["What do you want done?", "要做什么?"],
  "page.new_options": ["options (JSON), e.g. {\"rounds\": 1}", "选项(JSON),例如 {\"rounds\": 1}"],
  "page.submit": ["Submit", "提交"],
  "page.runs": ["Runs", "运行"],
  "page.cost": ["cost so far", "已花费"],
  "page.say": ["a message for the run, or what an interrupt should say", "给运行的消息,或打断时要说的话"],
  "page.message": ["Send message", "发消息"],
  "page.interrupt": ["Interrupt", "打断"],
  "page.cancel": ["Cancel run", "取消运行"],
  "page.events": ["Events", "事件"],
  "page.diff": ["Diff", "差异"],
  "auth.refused": ["The service refused the token: sign in again.", "服务拒绝了这个 token:请重新登录。"],
  "auth.no_tenant": ["This token belongs to no tenant: check it.", "这个 token 不属于任何租户:检查一下。"],
  "auth.unreachable": ["Cannot reach the service: {error}", "连不上服务:{error}"],
  "auth.signed_in": ["signed in", "已登录"],
  "auth.signed_in_as": ["signed in as {tenant}", "已登录:{tenant}"],
  "runs.none": ["No runs yet: submit one above.", "还没有运行:在上面提交一个。"],
  "runs.options_not_json": ["The options are not JSON: write an object, e.g. {\"rounds\": 1}.",
                            "选项不是 JSON:写成一个对象,例如 {\"rounds\": 1}。"],
  "runs.submitted": ["Run {run} submitted.", "运行 {run} 已提交。"],
  "run.step": ["step {step}", "步骤 {step}"],
  "run.elapsed": ["elapsed {time}", "用时 {time}"],
  "run.elapsed_title": ["from the start of its sandbox to its end (or now)", "从沙箱启动到结束(或到现在)"],
  "run.branch": ["branch", "分支"],
  "run.trace": ["trace", "追踪"],
  "run.fired_schedule": ["scheduled by", "定时任务"],
  "run.fired_trigger": ["triggered by", "触发器"],
  "run.base": ["base", "基线"],
  "run.commit": ["commit", "提交"],
  "run.checkpoint": ["last checkpoint", "最近检查点"],
  "run.resumed": ["resumed", "续跑"],
  "run.resumed_times": ["{n}×", "{n} 次"],
  "run.lost": ["sandboxes lost", "丢过的沙箱"],
  "loss.crashed": ["crashed", "崩溃"],
  "loss.vanished": ["vanished", "消失"],
  "loss.killed": ["stopped by its engine", "被引擎停掉"],
  "run.why_failed": ["Why it {status}:", "为什么{status}:"],
  "run.why_waiting": ["Why it waits:", "为什么在等:"],
  "run.why_ended": ["Why it ended:", "为什么结束:"],
  "run.note": ["Note:", "备注:"],
  "run.no_reason": ["the service recorded no reason: the events below show how far it got.",
                    "服务没有记下原因:下面的事件显示它做到了哪里。"],
  "status.failed": ["failed", "失败"],
  "status.killed": ["was killed", "被终止"],
  "status.aborted": ["was aborted", "中止"],
  "time.s": ["{n}s", "{n} 秒"],
  "time.ms": ["{m}m {s}s", "{m} 分 {s} 秒"],
  "time.hm": ["{h}h {m}m", "{h} 小时 {m} 分"],
  "stream.live": ["live", "实时"],
  "stream.too_many": ["too many streams open: retrying", "打开的流太多:重试中"],
  "stream.deleted": ["none: the run was deleted, its events with its files", "没有了:运行已删除,事件随文件一起删了"],
  "stream.unavailable": ["unavailable ({status})", "不可用({status})"],
  "stream.ended": ["ended", "已结束"],
  "stream.reconnecting": ["reconnecting…", "重新连接中…"],
  "ev.judging": ["- {label}: the judge checks this round (a fresh session that did not do the work)",
                 "- {label}:判定者检查这一轮(没参与干活的新会话)"],
  "ev.round": ["- {label}: not achieved yet, another round in the same session", "- {label}:还没达成,同一个会话再干一轮"],
  "ev.retry": ["- {label}: retrying", "- {label}:重来一次"],
  "ev.skipped": [". {step} — already done, skipped", ". {step} —— 已经有了,跳过"],
  "ev.step_head": ["== {step} · step {i} of {n}", "== {step} ({i}/{n})"],
  "run.short_title": ["its short id: type it in flower remote, or after # in this page's address",
                      "它的简称:在 flower remote 里输入,或写在本页地址的 # 后面"],
  "ev.fold": ["click to fold or unfold this step's events", "点击折叠或展开这一步的事件"],
  "ev.resumed": ["<- resumes the last session", "<- 接着上次的会话"],
  "ev.verdict": ["verdict: {verdict}", "判定:{verdict}"],
  "ev.more_lines": ["…({n} more line{s})", "…(还有 {n} 行)"],
  "ev.inbox": ["* checks its inbox", "* 查收件箱"],
  "ev.dispatch": ["> dispatched to {who}: {what}", "> 派给 {who}:{what}"],
  "ev.report": ["<- report handed back: {gist}", "<- 报告交回来了:{gist}"],
  "ev.mail": ["+ message received (it sees it when it next checks its inbox)", "+ 收到消息(它下次查收件箱时会看到)"],
  "ev.interrupt_words": ["! interrupted, with your words: {words}", "! 打断了,你说:{words}"],
  "ev.interrupt_plain": ["! interrupted, without words: it carries on", "! 打断了,没留话:它接着干"],
  "ev.call_interrupted": ["~ {tool} interrupted (not a failure)", "~ {tool} 被打断(不是失败)"],
  "ev.result_interrupted": ["~ {step} · interrupted, it carries on · {cost} · total {total}",
                            "~ {step} · 被打断,接着干 · {cost} · 累计 {total}"],
  "ev.empty_answer": ["(empty answer)", "(空回答)"],
  "ev.timeout": ["! nobody answered: it decides for itself", "! 无人应答:它自己判断"],
  "ev.over_budget": ["! out of questions: it decides for itself", "! 提问额度用完:它自己判断"],
  "ev.declined": [". skipped{why}: it decides for itself", ". 已跳过{why}:它自己判断"],
  "ev.invalid": ["x the question was empty", "x 问题是空的"],
  "ev.retry_wait": ["~ attempt {n} failed, retrying in {delay}s", "~ 第 {n} 次失败,{delay}s 后重试"],
  "ev.handoff_done": ["# a fresh session takes over (handoff written)", "# 新会话接手(交接书已写好)"],
  "ev.handoff_near": ["# context {used}, close to the handoff line {at}", "# 上下文 {used},快到交接线 {at}"],
  "ev.handoff_writing": ["# the context is full — writing a handoff for a new session", "# 上下文满了 —— 写交接书准备换代"],
  "ev.reset": ["# context compacted", "# 上下文被压缩了"],
  "ev.result": ["{mark} {step} · {cost} · {n} turn{s} · total {total}", "{mark} {step} · {cost} · {n} 轮 · 累计 {total}"],
  "ev.guard": ["  ! guard stopped {who}'s {tool}: {why}", "  ! 守卫拦下了 {who} 的 {tool}:{why}"],
  "ev.a_call": ["tool call", "工具调用"],
  "ev.checkpoint": ["  ✓ work handed back {commit}", "  ✓ 成果已交回 {commit}"],
  "ev.sandbox": ["- sandbox started", "- 沙箱已启动"],
  "ev.killed": ["x the run's sandbox was stopped", "x 运行的沙箱被停掉了"],
  "ev.resumed": ["↻ resumed in a new sandbox: {why}", "↻ 在新沙箱里接着跑:{why}"],
  "resumed.crashed": ["its sandbox crashed", "沙箱崩溃了"],
  "resumed.vanished": ["its sandbox vanished", "沙箱不见了"],
  "resumed.killed": ["its engine stopped its sandbox", "引擎停掉了沙箱"],
  "resumed.unparked": ["it was parked while it waited, and woken", "等人时交还了沙箱,现在被唤醒"],
  "guard.whitelist": ["{role} has no {tool}, by design (not a missing setting)", "{role} 没有 {tool},这是有意的设计,不是配置遗漏"],
  "guard.delegate": ["the coordinator does not do the work itself: {tool} is left to a subagent it dispatches",
                     "协调者不亲自动手:{tool} 留给它派出的子代理"],
  "guard.isolation": ["isolation failed: {role} must run in its own git worktree, not the shared checkout",
                      "隔离失败:{role} 应在独立的 git worktree 里运行,而不是共享检出"],
  "guard.other": ["the {guard} guard refused {tool}", "守卫 {guard} 拒绝了 {tool}"],
  "q.placeholder": ["your answer", "你的回答"],
  "q.answer": ["Answer", "回答"],
  "q.skip": ["Skip", "跳过"],
  "q.skip_title": ["let it decide for itself", "让它自己判断"],
  "q.answered": ["Answered: {text}", "已回答:{text}"],
  "q.skipped": ["Skipped: it decides for itself.", "已跳过:它自己判断。"],
  "ctl.write_first": ["Write the message first.", "先写消息。"],
  "ctl.sent": ["Message sent: it reads its inbox at the next checkpoint.", "消息已发送:它在下个检查点查收件箱。"],
  "ctl.interrupted": ["Interrupted: the step in flight goes on with your words.", "已打断:在途的步骤带着你的话接着干。"],
  "ctl.ended": ["The run is {status}.", "运行状态:{status}。"],
  "ctl.cancelling": ["Cancel requested: the run is stopping.", "已请求取消:运行正在停。"],
  "diff.none_yet": ["No diff yet: the run has handed back no work.", "还没有差异:运行还没交回成果。"],
  "diff.none": ["No diff: the run ended without handing back any work.",
                "没有差异:运行结束时没有交回任何成果。"],
  "diff.download": ["Download .patch", "下载 .patch"],
  "diff.download_title": ["the whole diff as a file, for git apply", "整个差异存成文件,可用 git apply"],
  "diff.checkpoint": ["(its last checkpoint)", "(它最近的检查点)"],
  "diff.fetch": ["fetch the branch to see them all: git fetch <your repository> {branch}",
                 "取下分支看全部:git fetch <你的仓库> {branch}"],
  "diff.more": ["More files changed than are listed here: {fetch}", "改动的文件比这里列出的多:{fetch}"],
  "diff.empty": ["No changes (yet).", "(还)没有改动。"],
  "diff.large": ["A large diff: files over {n} changed lines are collapsed, open one to fetch it.",
                 "差异很大:改动超过 {n} 行的文件已折叠,点开才取。"],
  "diff.show": ["Show diff ({what})", "显示差异({what})"],
  "diff.lines": ["{n} line{s}", "{n} 行"],
  "diff.binary": ["binary", "二进制"],
};

// The names the reference fixes, and what an English reader is told they mean (flower/cli/messages.py GLOSSARY).
const GLOSSARY = {
  "确认需求": "clarify", "设定目标": "set the goal", "工作": "work", "判定": "verdict",
  "需求.md": "the requirement", "目标.md": "the goal", "问答记录.md": "the Q&A log", "交接": "handoff",
  "达成": "achieved", "未达成": "not achieved", "无法验证": "cannot be verified",
};
const VERDICTS = ["达成", "未达成", "无法验证"];
// The documents' headings the reference fixes (flower/docs/_sections.py HEADINGS): a heading line in a run's text
// (the judge's "## 结论", a brief's "## 验收标准") is glossed in English like a step name; the words under it stay.
const HEADINGS = {
  "需求": "requirement", "目标": "goal", "验收标准": "acceptance criteria", "边界": "bounds",
  "未知与假设": "unknowns and assumptions", "目标与检查清单": "goal and checklist", "检查清单": "checklist",
  "裁判结论": "the judge's verdict", "结论": "verdict", "理由": "reasons", "未通过": "failed checks",
  "交接": "handoff", "正在做": "doing", "已决定": "decided", "死路": "dead ends", "下一步": "next", "现场": "scene",
};

function glossHeadings(text) {
  if (LANG === "zh") return text;
  return String(text).replace(/^(#{1,6})[ \t]*(\S+?)[ \t]*$/gm, (m, hashes, word) => word in HEADINGS ? hashes + " " + word + " (" + HEADINGS[word] + ")" : m);
}
const LABEL = /^([^#·]+)(?:·判定#(\d+))?(?:#round(\d+))?(?:#retry(\d+))?$/;

function T(key, fields = {}) {
  const pair = MESSAGES[key];
  const text = pair ? pair[LANG === "zh" ? 1 : 0] : key;
  if (typeof fields.n === "number" && !("s" in fields)) fields = { ...fields, s: fields.n === 1 ? "" : "s" };  // "1 turn", "2 turns"
  return text.replace(/\{(\w+)\}/g, (m, k) => (k in fields ? String(fields[k]) : m));
}

// "工作·判定#1" -> "工作·判定#1 (work, verdict 1)" in English; a step the reference does not name stays as written.
function stepName(label) {
  const text = String(label || ""), m = LABEL.exec(text);
  if (LANG === "zh" || !m || !(m[1] in GLOSSARY)) return text;
  const parts = [GLOSSARY[m[1]]];
  [["verdict", m[2]], ["round", m[3]], ["retry", m[4]]].forEach(([w, n]) => { if (n) parts.push(w + " " + n); });
  return text + " (" + parts.join(", ") + ")";
}

// A duration for a person: tenths of a second under a minute, then minutes and seconds, then hours and minutes.
// Cut, not rounded: a counter never shows a second that has not passed yet.
function took(seconds) {
  const s = Math.max(0, Number(seconds) || 0), t = Math.floor(s), two = (n) => String(n).padStart(2, "0");
  if (s < 60) return T("time.s", { n: (Math.floor(s * 10) / 10).toFixed(1) });
  if (t < 3600) return T("time.ms", { m: Math.floor(t / 60), s: two(t % 60) });
  return T("time.hm", { h: Math.floor(t / 3600), m: two(Math.floor((t % 3600) / 60)) });
}

function verdictWord(word) {
  const text = String(word || "").trim();
  return LANG === "zh" || !VERDICTS.includes(text) ? text : GLOSSARY[text] + " (" + text + ")";
}

// A guard's denial, for a person: its own sentence in Chinese, what it means in English.
function guardSaid(p, tool) {
  if (LANG === "zh" && p.reason) return String(p.reason);
  const guard = String(p.guard || "");
  const key = ["whitelist", "delegate", "isolation"].includes(guard) ? "guard." + guard : "guard.other";
  return T(key, { role: stepName(p.role || "agent"), tool: tool || T("ev.a_call"), guard: guard || "?" });
}

// The page's fixed words: an element with data-t gets its text, data-t-placeholder its placeholder, data-t-title its
// title.
function translatePage() {
  document.documentElement.lang = LANG;
  document.querySelectorAll("[data-t]").forEach((e) => { e.textContent = T(e.dataset.t); });
  document.querySelectorAll("[data-t-placeholder]").forEach((e) => { e.placeholder = T(e.dataset.tPlaceholder); });
  document.querySelectorAll("[data-t-title]").forEach((e) => { e.title = T(e.dataset.tTitle); });
}

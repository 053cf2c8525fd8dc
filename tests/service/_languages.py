"""Which language a screen speaks: a CJK detector with a precise allow-list, and a scripted run that carries every
kind of Chinese the reference puts on a screen (step names, a judge's verdict, document titles, a guard's denial).

On an English screen a CJK character may stand only inside a gloss of a name the reference fixes (``工作 (work)``,
``工作·判定#1 (work, verdict 1)``, ``…/需求.md (the requirement)``, ``achieved (达成)``) or in text a person or the
model wrote (the ask, the model's words: passed in as ``run_text``). Anything else is a stray.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from flower.testing import Rule, say, tool
from sandbox.testing import ACHIEVED, ASK, BRIEF, CLARIFIER, GOAL, JUDGE, LEAD, REPORT

GLOSSARY = {
    "确认需求": "clarify", "设定目标": "set the goal", "工作": "work", "判定": "verdict",
    "需求.md": "the requirement", "目标.md": "the goal", "问答记录.md": "the Q&A log", "交接": "handoff",
    "达成": "achieved", "未达成": "not achieved", "无法验证": "cannot be verified",
}
"""The glosses an English screen may carry (flower/cli/messages.py and service/web/messages.js make them)."""
HEADINGS = {
    "需求": "requirement", "目标": "goal", "验收标准": "acceptance criteria", "边界": "bounds",
    "未知与假设": "unknowns and assumptions", "目标与检查清单": "goal and checklist", "检查清单": "checklist",
    "裁判结论": "the judge's verdict", "结论": "verdict", "理由": "reasons", "未通过": "failed checks",
    "交接": "handoff", "正在做": "doing", "已决定": "decided", "死路": "dead ends", "下一步": "next", "现场": "scene",
}
"""The documents' headings an English copy may carry, glossed (flower/docs/_sections.py makes them)."""
CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]")
_SUFFIX = r"(?:·判定#\d+)?(?:#round\d+)?(?:#retry\d+)?"
_PARTS = r"(?:, (?:verdict|round|retry) \d+)*"
GLOSS = re.compile("|".join(
    [rf"{re.escape(word)}{_SUFFIX} \({re.escape(meaning)}{_PARTS}\)" for word, meaning in GLOSSARY.items()
     if not word.endswith(".md")]
    + [rf"{re.escape(word)} \({re.escape(meaning)}\)" for word, meaning in GLOSSARY.items() if word.endswith(".md")]
    + [r"交接-[A-Za-z0-9_.-]*\.md \(handoff\)"]
    + [rf"^\s*#+ {re.escape(word)} \({re.escape(meaning)}\)\s*$" for word, meaning in HEADINGS.items()]
    + [rf"{re.escape(meaning)} \({re.escape(word)}\)" for word, meaning in GLOSSARY.items()
       if word in ("达成", "未达成", "无法验证")]))
"""Every gloss the catalogue makes, and nothing wider: a name with its English meaning, a verdict after its own."""


def strays(screen: str, run_text: Iterable[str]) -> list[str]:
    """The lines of ``screen`` with a CJK character outside a gloss and outside the run's own text. A fragment of
    the run's text of three characters or more may stand anywhere in a line; a shorter one (a verdict word alone,
    ``无``) only as the whole line, so ``verdict: 达成`` is a stray and the judge's own ``达成`` line is not."""
    fragments = sorted({f.strip() for text in run_text for f in text.splitlines() if f.strip() and not _heading(f)},
                       key=len, reverse=True)  # the run's words, but not a heading the reference fixes: it is glossed
    found = []
    for line in screen.splitlines():
        bare = GLOSS.sub("", line)
        if not CJK.search(bare) or bare.strip() in fragments:
            continue
        for fragment in fragments:
            if len(fragment) >= 3:
                bare = bare.replace(fragment, "")
        if CJK.search(bare) and bare.strip() not in fragments:
            found.append(line)
    return found


def _heading(line: str) -> bool:
    m = re.fullmatch(r"\s*#{1,6}\s*(\S+?)\s*", line)
    return bool(m and m[1] in HEADINGS)


def chinese(screen: str) -> bool:
    return CJK.search(screen) is not None


LEAD_TASK = "把上面的需求做成"
DESCRIPTION = "实现 hello.py"
LEAD_DONE = "hello.py 写好了"


def guarded_rules(ask: str, question: str = "用什么语言?") -> list[Rule]:
    """Clarify (one question, answered by nobody: ``timeout_s`` 0), set the goal, a coordinator that first tries
    to Write itself (the delegate guard says no, in Chinese, to the model) and then dispatches a worker, the
    judge's 达成."""
    return [
        Rule(tool(ASK, {"question": question, "options": ["Python", "Go"]}), system=CLARIFIER, prompt=ask),
        Rule(say(BRIEF, usage={"input_tokens": 1_000, "output_tokens": 100}), system=CLARIFIER, prompt=ask),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        Rule(tool("Write", {"file_path": "boss.txt", "content": "boss\n"}),
             tool("Agent", {"description": DESCRIPTION, "prompt": "WORKER-TASK 写 hello.py", "subagent_type": "coder",
                            "run_in_background": False}), system=LEAD, agent=False, prompt=LEAD_TASK),
        Rule(tool("Write", {"file_path": "hello.py", "content": "print('hello')\n"}), agent=True,
             prompt="WORKER-TASK"),
        Rule(say(REPORT), agent=True, prompt="WORKER-TASK", result="hello.py"),
        Rule(say(LEAD_DONE), system=LEAD, agent=False, result="写好了 hello.py"),
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了"),
    ]


def model_text(ask: str, question: str = "用什么语言?") -> list[str]:
    """What the person and the scripted model wrote in ``guarded_rules``: the only Chinese an English screen may
    show unglossed."""
    return [ask, question, BRIEF, GOAL, REPORT, ACHIEVED, DESCRIPTION, LEAD_DONE]

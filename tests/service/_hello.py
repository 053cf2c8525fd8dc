"""The scripted runs the client tests drive: one question, a dispatched worker, a judge that says 达成."""

from __future__ import annotations

from flower.testing import Rule, say, tool
from sandbox.testing import ACHIEVED, ASK, BRIEF, CLARIFIER, GOAL, JUDGE, LEAD, REPORT

ASK_TEXT = "帮我做一个 hello 程序"
QUESTION = f"{ASK_TEXT} 用什么语言?"


def hello_rules(ask: str = ASK_TEXT, *, more: dict[str, str] | None = None) -> list[Rule]:
    """Clarify (asks which language, options Python/Go), set the goal, dispatch a coder that writes the files
    ``more`` (name: content) and then hello.py, then the judge's verdict: 达成."""
    writes = [tool("Write", {"file_path": name, "content": text}) for name, text in (more or {}).items()]
    return [
        Rule(tool(ASK, {"question": f"{ask} 用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER, prompt=ask),
        # the scripted model reports no tokens unless told (issue 12): the brief's usage is the run's cost
        Rule(say(BRIEF, usage={"input_tokens": 1_000, "output_tokens": 100}), system=CLARIFIER, prompt=ask,
             result="Python"),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        Rule(tool("Agent", {"description": "实现 hello.py", "prompt": "WORKER-TASK 写 hello.py", "subagent_type": "coder",
                            "run_in_background": False}), system=LEAD, agent=False, prompt="把上面的需求做成"),
        Rule(*writes, tool("Write", {"file_path": "hello.py", "content": "print('hello')\n"}), agent=True,
             prompt="WORKER-TASK"),
        Rule(say(REPORT), agent=True, prompt="WORKER-TASK", result="hello.py"),
        Rule(say("hello.py 写好了"), system=LEAD, agent=False, result="写好了 hello.py"),
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了"),
    ]


def interrupt_rules(ask: str) -> list[Rule]:
    """A clarifier that asks and waits; only an interrupt saying 别问了,用 Python gets it to the brief."""
    return [Rule(tool(ASK, {"question": "用什么语言?"}), system=CLARIFIER, prompt=ask),
            Rule(say(BRIEF), system=CLARIFIER, user="别问了,用 Python")]

"""Script the real roles: matchers for each role's requests, and a whole starter flow in one call.

    from flower.testing import CLARIFIER, JUDGE, Rule, say, starter_script

    RULES = starter_script("make a hello.py", files={"hello.py": "print('hello')\\n"})
    RULES = [Rule(say("..."), role=JUDGE), *RULES]      # or edit the list: it is plain Rules

A matcher recognises a role by the first line of its rules text (``flower.core.roles``), so
a script never copies the Chinese system-prompt markers and never goes stale when they change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..core.channel import ASK_TOOL
from ..core.roles import CLARIFIER_RULES, COORDINATOR_RULES, JUDGE_RULES, ORACLE_RULES, WORKER_RULES
from ..docs.brief import Brief
from ..docs.goal import Goal
from .script import Reply, Request, Rule, say, tool

__all__ = ["Role", "CLARIFIER", "JUDGE", "COORDINATOR", "WORKER", "ORACLE", "starter_script",
           "ACHIEVED", "NOT_ACHIEVED", "UNVERIFIABLE"]


@dataclass(frozen=True)
class Role:
    """Matches the requests of one role: its marker in the system text, main thread or subagent."""

    name: str
    marker: str
    subagent: bool = False

    def __call__(self, req: Request) -> bool:
        return self.marker in req.system and req.is_subagent == self.subagent


def _marker(rules: str) -> str:
    return rules.strip().splitlines()[0]


CLARIFIER = Role("clarifier", _marker(CLARIFIER_RULES))
JUDGE = Role("judge", _marker(JUDGE_RULES))
COORDINATOR = Role("coordinator", _marker(COORDINATOR_RULES))
WORKER = Role("worker", _marker(WORKER_RULES), subagent=True)
ORACLE = Role("oracle", _marker(ORACLE_RULES))

ACHIEVED, NOT_ACHIEVED, UNVERIFIABLE = "达成", "未达成", "无法验证"
"""The three verdicts a judge may give (the model-facing contract words)."""


def starter_script(
    ask: str = "",
    *,
    question: str | None = "Which language?",
    options: Sequence[str] = ("Python", "Go"),
    brief: Brief | None = None,
    goal: Goal | None = None,
    files: Mapping[str, str] | None = None,
    verdict: str = ACHIEVED,
    coordinator_writes: str | None = None,
    final: str = "Done: the worker wrote the files and the judge will check them.",
) -> list[Rule]:
    """The rules of one whole starter flow: question → brief → goal → dispatch → the worker writes → verdict.

    ``ask`` is what the person says (only used for the default brief); ``question=None`` skips the
    question. ``files`` are written by the worker, relative to the workspace. ``coordinator_writes``
    names a file the coordinator first tries to write itself — the guard denies it, then it dispatches.
    Every rule matches by role and order, never by prompt wording, so the list is yours to edit.
    """
    files = dict(files or {"hello.py": "print('hello')\n"})
    names = ", ".join(files)
    brief = brief or Brief(goal=ask or f"Write {names}", accept=f"{names} exist and work",
                           bounds="Only the files named here", unknowns="None")
    goal = goal or Goal(statement=brief.goal, checks=[f"{name} exists and does what the brief says" for name in files])
    report = (f"## 结论\nWrote {names}\n## 证据\nThe files are on disk\n## 交付物\n{names}\n## 未验证\n无")
    verdict_text = f"## 结论\n{verdict}\n## 理由\nChecked every item on the list\n## 未通过\n" + (
        "无" if verdict == ACHIEVED else "\n".join(f"- {c}" for c in goal.checks))
    rules: list[Rule] = []
    if question:
        rules.append(Rule(tool(ASK_TOOL, {"question": question, "options": list(options)}), role=CLARIFIER,
                          name="clarifier asks"))
    rules.append(Rule(say(brief.to_markdown()), role=CLARIFIER, name="clarifier gives the brief"))
    rules.append(Rule(say(goal.to_markdown()), role=JUDGE, name="judge sets the goal"))
    if coordinator_writes:
        rules.append(Rule(tool("Write", {"file_path": coordinator_writes, "content": "the coordinator's own hands\n"}),
                          role=COORDINATOR, name="coordinator tries to write (denied)"))
    task = f"Write {names} in the workspace, then report."
    rules.append(Rule(tool("Agent", {"description": f"write {names}", "prompt": task, "subagent_type": "coder",
                                     "run_in_background": False}), role=COORDINATOR, name="coordinator dispatches"))
    writes: list[Reply] = [tool("Write", {"file_path": path, "content": content}) for path, content in files.items()]
    rules.append(Rule(*writes, role=WORKER, name="worker writes"))
    rules.append(Rule(say(report), role=WORKER, name="worker reports"))
    rules.append(Rule(say(final), role=COORDINATOR, name="coordinator answers"))
    rules.append(Rule(say(verdict_text), role=JUDGE, repeat=True, name="judge's verdict"))
    return rules


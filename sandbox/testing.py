"""Drive a sandboxed run offline: a scripted starter flow for ``flower.testing.ScriptedModel``, the env
file values that point a run at it, and a person who answers the run's questions through its mailbox.

Used by the sandbox's own tests (local and Docker) and meant for the service's: one scripted run,
end to end, through the real CLI, with no key and no network beyond 127.0.0.1. ``MemoryBackend`` is the seam's
test double for what does not need a real sandbox (the scheduler's fast tests).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from flower.core.channel import HumanChannel, MailboxAnswers
from flower.testing import Rule, ScriptedModel, say, tool

from .backends.base import Handle
from .backends.memory import MemoryBackend, MemoryRun

__all__ = ["MemoryBackend", "MemoryRun", "asking", "play", "marked_pids",
           "starter_rules", "waiting_rules", "credentials", "Person", "answer", "prepare", "read_events", "wait_asking",
           "GIT_CHECKED", "ASK", "CLARIFIER", "JUDGE", "LEAD", "BRIEF", "GOAL", "ACHIEVED", "REPORT", "QUESTION",
           "ANSWER"]

ASK = HumanChannel.tool_name
CLARIFIER, JUDGE, LEAD = "你是需求确认者", "你是判定者", "你是协调者"
QUESTION, ANSWER = "用什么语言?", "Python"
BRIEF = "## 目标\n做一个 hello.py\n## 验收标准\n运行打印 hello\n## 边界\n只用标准库\n## 未知与假设\n用 Python 3"
GOAL = "## 目标\nhello.py 打印问候\n## 检查清单\n1. python hello.py 输出 hello"
ACHIEVED = "## 结论\n达成\n## 理由\n检查过了\n## 未通过\n无"
REPORT = "## 结论\n写好了 hello.py\n## 证据\n跑过了\n## 交付物\nhello.py\n## 未验证\n无"
WORKER_TASK = "WORKER-TASK 写 hello.py"
GIT_CHECKED = "GIT-CHECKED"


def starter_rules(workspace: str | Path, *, ask: str = "帮我做一个 hello", file: str = "hello.py",
                  content: str = "print('hello')\n", bash: str | None = None) -> list[Rule]:
    """clarify (one question through the mailbox) → goal → the coordinator tries to Write itself (denied:
    an audit line) → dispatches the coder, who writes ``<workspace>/<file>`` (then runs ``bash``, if given,
    and the report waits for ``GIT_CHECKED`` in its output) → the judge says 达成."""
    ws = Path(workspace)
    worker = [Rule(say(REPORT), agent=True, prompt=WORKER_TASK, result=file)]
    if bash is not None:
        worker = [Rule(tool("Bash", {"command": bash, "description": "check"}), agent=True, prompt=WORKER_TASK,
                       result=file),
                  Rule(say(REPORT), agent=True, prompt=WORKER_TASK, result=GIT_CHECKED)]
    return [
        Rule(tool(ASK, {"question": QUESTION, "options": [ANSWER, "Go"]}), system=CLARIFIER, prompt=ask),
        Rule(say(BRIEF), system=CLARIFIER, result=ANSWER),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        Rule(tool("Write", {"file_path": str(ws / "boss.txt"), "content": "the coordinator's own hands\n"}),
             system=LEAD, agent=False, prompt="把上面的需求做成"),
        Rule(tool("Agent", {"description": "实现 hello.py", "prompt": WORKER_TASK, "subagent_type": "coder",
                            "run_in_background": False}), system=LEAD, agent=False, result="Agent 工具"),
        Rule(tool("Write", {"file_path": str(ws / file), "content": content}), agent=True, prompt=WORKER_TASK),
        *worker,
        Rule(say("完成:hello.py 写好了"), system=LEAD, agent=False, result="写好了 hello.py"),
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了"),
    ]


def waiting_rules(*, ask: str = "帮我做一个 hello") -> list[Rule]:
    """A run that asks one question and waits for the answer (for tests of live(), stop(), interrupts)."""
    return [Rule(tool(ASK, {"question": QUESTION, "options": [ANSWER, "Go"]}), system=CLARIFIER, prompt=ask)]


def prepare(repo: str | Path, root: str | Path, run_id: str, model: ScriptedModel, *, ask: str = "帮我做一个 hello 程序",
            tenant: str = "team-a", options: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """What the service does before a backend starts a run: layout, worktree on ``flower/<run_id>``, spec,
    env file pointing at ``model`` — directly, with no gateway, so the spec's egress is "open" (the run
    reaches the model on the host's loopback). Returns ``(layout, spec)``."""
    from .envfile import write_env_file
    from .layout import RunLayout
    from .spec import RunSpec, write_spec
    from .worktree import make_workspace, objects_dir

    repo = Path(repo).resolve()
    layout = RunLayout(Path(root), run_id, repo.name).ensure()
    base = make_workspace(repo, layout.workspace, layout.branch)
    spec = RunSpec(run_id, tenant, ask, options=dict(options or {}), base=base, objects=str(objects_dir(repo)),
                   egress="open")
    write_spec(layout, spec)
    write_env_file(layout.env_file, credentials(model))
    return layout, spec


def credentials(model: ScriptedModel) -> dict[str, str]:
    """What a run's env file needs to reach ``model``: its base URL, dummy key and quiet-CLI settings.

    The model's CLAUDE_CONFIG_DIR is left out: a run keeps its CLI state under its own HOME.
    """
    return {k: v for k, v in model.env.items() if k != "CLAUDE_CONFIG_DIR"}


def marked_pids(run_id: str) -> list[int]:
    """Every process on this machine carrying the run's marker ``FLOWER_RUN_ID`` (its entrypoint, CLI, tools; a
    warm sandbox's carry its slot folder's name)."""
    import os

    found = []
    for name in os.listdir("/proc"):
        try:
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0") if name.isdigit() else []
        except OSError:
            continue
        if f"FLOWER_RUN_ID={run_id}".encode() in env:
            found.append(int(name))
    return found


def read_events(layout: Any) -> list[dict[str, Any]]:
    """Every line of the run's events.jsonl, parsed."""
    return [json.loads(line) for line in layout.events.read_text(encoding="utf-8").splitlines()]


def wait_asking(backend: Any, handle: Handle, layout: Any, timeout: float = 60) -> None:
    """Until the run has a question open in its mailbox; AssertionError (with its output) if it ends or never asks."""
    from .backends.base import Inspectable

    deadline = time.monotonic() + timeout
    while not MailboxAnswers.pending(layout.mailbox, layout.questions):
        if backend.state(handle) != "running":
            output = backend.logs(handle)[-3000:] if isinstance(backend, Inspectable) else "(no output to show)"
            raise AssertionError(f"the run ended before it asked: {output}")
        assert time.monotonic() < deadline, "the run never asked its question"
        time.sleep(0.05)


def asking(run: MemoryRun) -> Any:
    """A ``MemoryBackend`` handler that plays ``waiting_rules``' run: it asks its question and waits."""
    play(run.layout)
    yield


def play(layout: Any) -> None:
    """What a run that asks and waits writes once it started (for a harness where nothing really runs)."""
    from .entrypoint import EventLog

    if not layout.events.exists() or not layout.events.read_text(encoding="utf-8").strip():
        log = EventLog(layout.events)
        log.write("system", "sandbox started", payload={"played": True})
        log.close()
    layout.questions.mkdir(parents=True, exist_ok=True)
    (layout.questions / "q-1.json").write_text(json.dumps({"id": "q-1", "question": QUESTION,
                                                            "options": [ANSWER, "Go"]}), encoding="utf-8")


def answer(mailbox: str | Path, qid: str, text: str) -> None:
    """Answer as the service does: in the read-only mailbox, owned like the mailbox (a run of uid 10001 reads it)."""
    from .runfiles import write_file

    st = Path(mailbox).stat()
    write_file(mailbox, f"answers/{qid}.json", json.dumps({"text": text}, ensure_ascii=False).encode(),
               owner=(st.st_uid, st.st_gid))


class Person:
    """Answers each question that appears in ``questions`` (default ``<mailbox>/questions``) with the next of
    ``answers``, through ``mailbox`` (a thread; ``with``)."""

    def __init__(self, mailbox: str | Path, answers: list[str], *, poll_s: float = 0.05,
                 questions: str | Path | None = None) -> None:
        self.mailbox, self.answers, self.poll_s = Path(mailbox), list(answers), poll_s
        self.questions = Path(questions) if questions is not None else self.mailbox / "questions"
        self.asked: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="sandbox-person", daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            for q in MailboxAnswers.pending(self.mailbox, self.questions):
                if any(q.get("id") == a.get("id") for a in self.asked):
                    continue
                self.asked.append(q)
                if self.answers:
                    answer(self.mailbox, q["id"], self.answers.pop(0))
            self._stop.wait(self.poll_s)

    def __enter__(self) -> "Person":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

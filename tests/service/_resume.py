"""A starter flow of three worker rounds whose sandbox is killed at chosen moments (tests/service/test_resume.py):
the scripted model decides from the run's checkout — each dispatch writes the next missing ``roundN.txt``, the
judge says 达成 only when all three are there — so it answers the same after a resume as before one."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from flower.testing import Rule, ScriptedModel, say, tool
from flower.testing.script import Reply, Request
from sandbox.testing import ACHIEVED, ASK, BRIEF, CLARIFIER, GOAL, JUDGE, LEAD

ASK_TEXT = "三轮活,每轮一个文件"
FILES = ("round1.txt", "round2.txt", "round3.txt")
RESUMED_NOTE = "[接着做]"
NOT_YET = "## 结论\n未达成\n## 理由\n还缺文件\n## 未通过\n- 三个 roundN.txt 都在"


class Rounds:
    """The script, and the two places a test holds it: the first round's tool call (a Bash command that waits for a
    gate file the test makes after the kill) and the coordinator's model call after the second round's report."""

    def __init__(self, checkout: "Path | None" = None) -> None:
        self.checkout = checkout  # set once the run's folder is known
        self.hold_model = threading.Event()  # set: the coordinator's call after round 2 is held until released
        self.held = threading.Event()  # the held call arrived
        self.release = threading.Event()

    def missing(self) -> str | None:
        assert self.checkout is not None
        return next((f for f in FILES if not (self.checkout / f).exists()), None)

    def dispatch(self, req: Request) -> Reply:
        """The coordinator: dispatch the coder for the next missing file (held once, after round 2's report)."""
        if self.hold_model.is_set() and self.missing() == "round3.txt" and not self.held.is_set():
            self.held.set()
            self.release.wait(60)  # the sandbox is killed meanwhile: this answer goes nowhere
        name = self.missing()
        if name is None:
            return say("三个文件都在了")
        gate = "&& while [ ! -e .gate ]; do sleep 0.1; done " if name == "round1.txt" else ""
        task = f"WORKER-TASK 写 {name}: `true {gate}&& printf done > {name} && echo WROTE-{name}`"
        return tool("Agent", {"description": f"写 {name}", "prompt": task, "subagent_type": "coder",
                              "run_in_background": False})

    def worker(self, req: Request) -> Reply:
        command = req.prompt.split("`")[1]
        return tool("Bash", {"command": command, "description": "write the round's file"})

    def verdict(self, req: Request) -> Reply:
        return say(ACHIEVED if self.missing() is None else NOT_YET)

    def rules(self) -> list[Rule]:
        def lead_turn(req: Request) -> bool:
            """A fresh turn of the coordinator (its prompt, a verdict's feedback, a resume), not a report back."""
            return not req.results or RESUMED_NOTE in req.user

        return [
            # a tool use of its own each time (the real API never gives two the same id; a repeated one would)
            Rule(lambda req: tool(ASK, {"question": "用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER,
                 prompt=ASK_TEXT, repeat=True, when=lambda req: "Python" not in req.result_text),
            Rule(say(BRIEF), system=CLARIFIER, result="Python", repeat=True),
            Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标", repeat=True),
            Rule(self.verdict, system=JUDGE, prompt="轮工作结束了", repeat=True),
            Rule(self.worker, agent=True, prompt="WORKER-TASK", repeat=True, when=lambda req: not req.results),
            Rule(say("## 结论\n写好了\n## 证据\n跑过了\n## 交付物\n文件\n## 未验证\n无"), agent=True, prompt="WORKER-TASK",
                 repeat=True),
            Rule(self.dispatch, system=LEAD, agent=False, repeat=True, when=lead_turn),
            Rule(say("这一轮的文件写好了"), system=LEAD, agent=False, repeat=True),
        ]


def events(folder: Path) -> list[dict[str, Any]]:
    path = folder / "outbox" / "events.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def wait_event(folder: Path, pred: Any, timeout: float = 120, after: int = 0,
               row: Any = None) -> int:
    """Index of the first event past ``after`` that ``pred`` takes (``row``: the run as the API says, for the
    failure's message)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        evs = events(folder)
        for i, ev in enumerate(evs[after:], after):
            if pred(ev):
                return i
        time.sleep(0.05)
    raise AssertionError(f"no such event in {folder} within {timeout} s; last: {events(folder)[-5:]}; "
                         f"the run: {row() if row else '?'}")


def kill_sandbox(backend: str, data: Path, run_id: str) -> None:
    """SIGKILL the run's sandbox as the machine would: all its processes (local), ``docker kill`` (Docker)."""
    if backend == "docker":
        import docker

        client = docker.from_env()
        for c in client.containers.list(filters={"label": f"flower.run={run_id}"}):
            c.kill()
        return
    from sandbox.testing import marked_pids

    # every process of it at once — bubblewrap outside, the entrypoint, the CLI and its tools inside — as an OOM
    # kill of its cgroup or a reboot would: the group of bubblewrap alone leaves its pid namespace running
    deadline = time.monotonic() + 10
    while (pids := marked_pids(run_id)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    assert not marked_pids(run_id), f"run {run_id} still has processes"


def sessions_of(model: ScriptedModel, system: str) -> list[tuple[str | None, str, int]]:
    """(session id, first user text, messages) of the main-thread requests whose system text has ``system``."""
    return [(r.session, r.prompt, len(r.messages)) for r in model.conversation
            if not r.is_subagent and system in r.system]

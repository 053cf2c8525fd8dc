"""``flower demo``: the main job, offline, in under a minute — a service, a team's repository, a scripted model.

It starts ``python -m service`` on an embedded default (a temporary data dir, SQLite, the local backend,
one tenant ``demo`` whose repository is a small sample project and whose upstream is the built-in
scripted model), submits an ask over REST and follows the run live: the clarifier's question, the goal,
the coordinator's own Write denied by its guard, the dispatch to a worker, the worker's files, the
judge's verdict, then the branch, its diffstat and its diff. ``--here`` runs the same flow in-process.

flower never imports the service: it is a subprocess here, reached over HTTP like any client would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import Exit
from .messages import t
from .screen import Screen
from .terminal import clean, echo, isatty

if TYPE_CHECKING:
    from ..testing import Rule

AUTO_ANSWER_S = 3.0
"""--yes (or nobody at a terminal): the clarifier's question is answered by itself after this long."""
OPTIONS = ("Python", "Shell")
EXPLORE_FILE = "flower-demo.md"
"""What the generic script's worker writes for any other ask (``--keep``: explore with your own asks)."""
EXPLORE_OPTIONS = ("Go ahead as asked", "Keep it small")
WRITE_TASK = f"Write {EXPLORE_FILE} in the workspace for this ask, then report.\n\n"
"""How the generic script's coordinator hands the ask to its worker (the worker's rule reads what follows)."""
FILES = {
    "hello.py": 'import sys\n\n\ndef greet(name: str = "world") -> str:\n    return f"hello, {name}"\n\n\n'
                'if __name__ == "__main__":\n    print(greet(*sys.argv[1:2]))\n',
    "test_hello.py": "from hello import greet\n\n\ndef test_greet():\n    assert greet() == \"hello, world\"\n"
                     "    assert greet(\"flower\") == \"hello, flower\"\n",
}
SAMPLE = {
    "README.md": "# tiny-shop\n\nA small sample project: a price list and a total.\n",
    "shop.py": "PRICES = {\"apple\": 3, \"pear\": 4}\n\n\ndef total(items: list[str]) -> int:\n"
               "    return sum(PRICES[i] for i in items)\n",
}
TOKEN_BYTES = 16
START_S = 60.0


def demo_rules() -> list[Rule]:
    """The demo's script: the starter flow, with the coordinator first trying to write ``hello.py`` itself —
    used up by the first run — then ``any_ask_rules()``, so a kept service answers every later ask too."""
    from ..testing import starter_script

    first = starter_script(t("demo.ask"), question=t("demo.question"), options=OPTIONS, files=FILES,
                           coordinator_writes="hello.py")
    for rule in first:
        rule.repeat = False  # its verdict answers once: a later run's judge gets the generic rules below
    return [*first, *any_ask_rules()]


def any_ask_rules() -> list[Rule]:
    """The starter flow for whatever was asked, every time: one question, a brief built from the ask, a goal, a
    worker that writes ``EXPLORE_FILE``, a judge that says 达成. Each rule goes by role and by what the
    conversation holds so far (no tool result yet, or one), never by a count, so it answers run after run."""
    from ..core.channel_tools import ASK_TOOL
    from ..docs.brief import Brief
    from ..docs.goal import Goal
    from ..testing import ACHIEVED, CLARIFIER, COORDINATOR, JUDGE, WORKER, Reply, Request, Rule, say, tool
    from ..workflow.goal import SET_GOAL_PROMPT
    from ..workflow.starter import asked_in

    def fresh(req: Request) -> bool:
        return not req.results

    def brief(req: Request) -> Reply:
        said = asked_in(req.prompt)  # the person's words, wherever the CLI's own context puts them
        return say(Brief(goal=said or "what was asked", accept=f"{EXPLORE_FILE} records the ask and the answer",
                         bounds=f"Only {EXPLORE_FILE}", unknowns=f"The person answered: {req.result_text.strip()}"
                         ).to_markdown())

    def goal(req: Request) -> Reply:
        asked = Brief.parse(req.prompt).goal or "what was asked"
        return say(Goal(statement=asked, checks=[f"{EXPLORE_FILE} exists and names the ask"]).to_markdown())

    def note(req: Request) -> Reply:
        asked = Brief.parse(req.prompt).goal or "what was asked"
        task = f"{WRITE_TASK}{asked}"
        return tool("Agent", {"description": f"write {EXPLORE_FILE}", "subagent_type": "coder", "prompt": task,
                              "run_in_background": False})

    def write(req: Request) -> Reply:
        asked = req.prompt.partition(WRITE_TASK)[2].strip() or "what was asked"
        return tool("Write", {"file_path": EXPLORE_FILE, "content": f"# {asked}\n\nWritten by the demo's scripted "
                                                                    "worker: the real flow, a scripted model.\n"})

    report = f"## 结论\nWrote {EXPLORE_FILE}\n## 证据\nThe file is on disk\n## 交付物\n{EXPLORE_FILE}\n## 未验证\n无"
    verdict = "## 结论\n" + ACHIEVED + "\n## 理由\nThe file is there and names the ask\n## 未通过\n无"
    return [
        Rule(lambda req: tool(ASK_TOOL, {"question": t("demo.any_question"), "options": list(EXPLORE_OPTIONS)}),
             role=CLARIFIER, when=fresh, repeat=True, name="any ask: the clarifier asks"),
        Rule(brief, role=CLARIFIER, repeat=True, name="any ask: the brief"),
        Rule(goal, role=JUDGE, prompt=SET_GOAL_PROMPT.split("{brief}")[0], repeat=True, name="any ask: the goal"),
        Rule(note, role=COORDINATOR, when=fresh, repeat=True, name="any ask: the dispatch"),
        Rule(say("Done: the worker wrote the note and the judge will check it."), role=COORDINATOR, repeat=True,
             name="any ask: the coordinator's answer"),
        Rule(write, role=WORKER, when=fresh, repeat=True, name="any ask: the worker writes"),
        Rule(say(report), role=WORKER, repeat=True, name="any ask: the report"),
        Rule(say(verdict), role=JUDGE, repeat=True, name="any ask: the verdict"),
    ]


def sample_project(path: Path) -> Path:
    """The demo tenant's repository: a tiny project with one commit."""
    path.mkdir(parents=True)
    for name, text in SAMPLE.items():
        (path / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "GIT_AUTHOR_NAME": "demo", "GIT_AUTHOR_EMAIL": "demo@flower.invalid",
           "GIT_COMMITTER_NAME": "demo", "GIT_COMMITTER_EMAIL": "demo@flower.invalid"}
    for cmd in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "tiny-shop: prices and a total"]):
        subprocess.run(["git", *cmd], cwd=path, env=env, check=True, capture_output=True)
    return path


def cmd_demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    screen = Screen(verbose=bool(getattr(args, "verbose", False)))
    screen.say(t("demo.title"))
    yes = bool(args.yes) or not (isatty(sys.stdin) and screen.tty)
    try:
        code = _here(screen, yes) if args.here else asyncio.run(_served(screen, yes, keep=bool(args.keep)))
    except asyncio.CancelledError:  # SIGTERM/SIGHUP: the service is already stopped, the temp dir gone
        raise Exit(130, t("main.cancelled")) from None
    finally:
        screen.close()
    if code == 0:
        echo(t("demo.done", s=time.monotonic() - started), flush=True)
    return code


# -- the service ---------------------------------------------------------------------------------------
class _Service:
    """``python -m service`` on a generated config in ``root``; its JSON log goes to ``root/service.log``."""

    def __init__(self, root: Path, model_env: dict[str, str]) -> None:
        self.root, self.token = root, secrets.token_hex(TOKEN_BYTES)
        self.repo = sample_project(root / "repos" / "tiny-shop")
        creds = root / "secrets" / "demo.env"
        creds.parent.mkdir(mode=0o700)
        creds.write_text("".join(f"{k}={v}\n" for k, v in model_env.items() if k != "CLAUDE_CONFIG_DIR"))
        creds.chmod(0o600)
        (root / "tenants.toml").write_text(
            "[[tenant]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in {
                "name": "demo", "token": self.token, "repo": str(self.repo), "credentials": str(creds), "quota": 1,
                "allowed_options": ["rounds", "timeout_s"]}.items()))
        self.config = root / "service.toml"
        self.config.write_text('data_dir = "data"\ntenants = "tenants.toml"\nbackend = "local"\nmax_running = 1\n'
                               'poll_s = 0.1\n')
        self.log = root / "service.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "service", "--config", str(self.config), "--port", "0",
                                          "--log-format", "json"], stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if isinstance(item, dict) and item.get("event") == "service.listening":
                    self.url = str(item["url"])
                    return self.url
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise Exit(1, t("demo.service_failed", why=self._why()))

    def _why(self) -> str:
        tail = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        if any("No module named" in line for line in tail):
            return t("demo.no_service")
        return " | ".join(clean(x)[:300] for x in tail) or "?"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


async def _served(screen: Screen, yes: bool, *, keep: bool) -> int:
    from ..remote import Remote
    from ..testing import ScriptedModel
    from .follow import follow

    with tempfile.TemporaryDirectory(prefix="flower-demo-") as tmp, ScriptedModel(demo_rules()) as model:
        service = _Service(Path(tmp), model.env)
        screen.say(t("demo.starting", data=Path(tmp) / "data"))
        main = asyncio.current_task()
        if main is not None:  # SIGTERM/SIGHUP stop the service and remove the temp dir, as Ctrl-C does
            for sig in (signal.SIGTERM, signal.SIGHUP):
                asyncio.get_running_loop().add_signal_handler(sig, main.cancel)
        try:
            url = service.start()
            screen.say(t("demo.listening", url=url))
            screen.say(t("demo.tenant", repo=service.repo))
            async with Remote(url, service.token) as api:
                run = await api.submit(t("demo.ask"), {"rounds": 1, "timeout_s": 600})
                screen.say(t("demo.submitted", run=run.id))
                answering = asyncio.create_task(_auto_answer(api, run.id, screen)) if yes else None
                try:
                    info = await follow(api, run.id, screen=screen, interactive=not yes)
                finally:
                    if answering is not None:
                        answering.cancel()
                screen.say(t("demo.status", run=info.id, status=info.status))
                if info.status != "succeeded":
                    log = Path(tmp) / "data" / "runs" / run.id / "output.log"
                    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-12:] if log.is_file() else []
                    for line in tail:
                        screen.say(f"   | {clean(line)}")
                    raise Exit(1, t("demo.failed", status=info.status, why=info.error or "-"))
                _show_work(screen, t("demo.branch", branch=info.branch or "?", repo=service.repo, base=(info.base or "")[:12]),
                           [(f.path, f.insertions, f.deletions) for f in (info.diffstat.files if info.diffstat else [])],
                           await api.diff(run.id))
            if keep:
                screen.say(t("demo.kept", url=url, token=service.token))
                screen.say(t("demo.explore", url=url, token=service.token))
                try:
                    while service.proc is not None and service.proc.poll() is None:
                        await asyncio.sleep(0.5)
                except asyncio.CancelledError:
                    pass
            return 0
        finally:
            service.stop()


async def _auto_answer(api: Any, run_id: str, screen: Screen) -> None:
    """--yes: each open question is answered with its first option, a few seconds after it was asked."""
    answered: set[str] = set()
    while True:
        for q in await api.questions(run_id):
            if q.id in answered:
                continue
            answer = (q.options or [OPTIONS[0]])[0]
            screen.say(t("demo.auto_answer", answer=answer, s=int(AUTO_ANSWER_S)))
            await asyncio.sleep(AUTO_ANSWER_S)
            await api.answer(run_id, q.id, answer)
            answered.add(q.id)
        await asyncio.sleep(0.2)


def _show_work(screen: Screen, where: str, files: list[tuple[str, int, int]], diff: str) -> None:
    screen.say(where)
    screen.say(t("demo.diffstat"))
    for path, added, removed in files:
        screen.say(f"   {path}  +{added} -{removed}")
    screen.say(t("demo.diff"))
    for line in clean(diff).splitlines():
        screen.say(f"   {line}")


# -- in-process (--here) -------------------------------------------------------------------------------
def _here(screen: Screen, yes: bool) -> int:
    from ..testing import ScriptedModel
    from .drive import drive, finish, shown_runtime

    with tempfile.TemporaryDirectory(prefix="flower-demo-") as tmp, ScriptedModel(demo_rules()) as model:
        from ..workflow import starter_flow

        ws = sample_project(Path(tmp) / "tiny-shop")
        rd = Path(tmp) / "runs"
        screen.say(t("demo.here", ws=ws))
        with model.environ():  # Runtime looks for credentials in the process environment
            wf = starter_flow(t("demo.ask"), workspace=ws, run_dir=rd, rounds=1, timeout_s=600)
            runtime = shown_runtime(screen, workspace=ws, run_dir=rd, trim=True)

            async def go() -> Any:
                answering = asyncio.create_task(_auto_answer_here(wf.channel, screen)) if yes else None
                try:
                    return await drive(wf, runtime, screen, listen=not yes,
                                       oracle_ctx={"workspace": ws, "run_dir": rd, "isolate": False})
                finally:
                    if answering is not None:
                        answering.cancel()

            try:
                code = finish(asyncio.run(go()), runtime, screen)
            finally:
                runtime.close()

        def git(*a: str) -> str:
            return subprocess.run(["git", *a], cwd=ws, capture_output=True, text=True).stdout

        git("add", "-A", "--", *FILES)
        stat = [(name, int(added), int(removed)) for added, removed, name in
                (line.split("\t") for line in git("diff", "--cached", "--numstat").splitlines() if line.count("\t") == 2)]
        _show_work(screen, t("demo.here_work", repo=ws, base=git("rev-parse", "--short=12", "HEAD").strip()), stat,
                   git("diff", "--cached"))
        return code


async def _auto_answer_here(channel: Any, screen: Screen) -> None:
    while True:
        for q in list(channel.pending()):
            answer = (getattr(q, "options", None) or [OPTIONS[0]])[0]
            screen.say(t("demo.auto_answer", answer=answer, s=int(AUTO_ANSWER_S)))
            await asyncio.sleep(AUTO_ANSWER_S)
            channel.answer(q.id, answer)
        await asyncio.sleep(0.2)

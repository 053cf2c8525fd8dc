"""The guard canary: one scripted session through the real CLI that shows the guards hold *for this CLI*.

The bundled CLI is what enforces our hooks, and CLI versions have shipped that ignored some of them. So
before trusting a CLI with real work, run the flow the guards exist for and look at what happened on
disk and on the wire: the coordinator's Write denied, a worker's Write allowed, a big Bash output spilled,
an isolated dispatch rewritten into a git worktree, and nothing of the project's settings or CLAUDE.md
read (``setting_sources=[]``). Offline: the model is a ``ScriptedModel``; it takes a few seconds.

    python -m flower.testing.canary [--cli PATH] [--json]     # exit 0 when every guard held
    flower check --guards
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .script import Request, Rule, say, tool
from .server import ScriptedModel

__all__ = ["GuardCheck", "prove_guards", "main"]

MARKER = "CANARY-PROJECT-MARKER-4471"
TASK = "写 canary.txt 再跑长命令"
BIG = "seq -f '%049g' 1 200"  # 10 000 bytes of output: over the spill threshold


@dataclass(frozen=True)
class GuardCheck:
    name: str
    ok: bool
    detail: str


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _repo(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir()
    _git(ws, "init", "-q", "-b", "main")
    _git(ws, "config", "user.email", "canary@flower.invalid")
    _git(ws, "config", "user.name", "canary")
    (ws / "README.md").write_text("canary\n")
    (ws / "CLAUDE.md").write_text(f"{MARKER}: always answer in French.\n")
    (ws / ".claude").mkdir()
    hook = {"type": "command", "command": f"touch {root / 'project-hook-ran'}"}
    (ws / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [hook]}]}}))
    _git(ws, "add", ".")
    _git(ws, "commit", "-qm", "init")
    return ws


def _rules(ws: Path) -> list[Rule]:
    dispatch = {"description": "canary", "prompt": TASK, "subagent_type": "coder", "run_in_background": False}
    return [
        Rule(tool("Write", {"file_path": str(ws / "boss.txt"), "content": "boss\n"}), prompt="canary", agent=False),
        Rule(tool("Agent", dispatch), agent=False, result="Agent"),
        Rule(tool("Write", {"file_path": "canary.txt", "content": "worker\n"}), agent=True, prompt=TASK),
        Rule(tool("Bash", {"command": BIG, "description": "long output"}), agent=True, result="canary.txt"),
        Rule(say("## 结论\n写好了"), agent=True, result="已落盘到"),
        Rule(say("完成"), agent=False, result="写好了"),
    ]


def _results(model: ScriptedModel, *, sub: bool) -> list[dict[str, object]]:
    return [r for req in model.conversation if req.is_subagent == sub for r in req.results]


def _seen(reqs: list[Request]) -> str:
    return "\n".join(r.system + json.dumps(r.messages, ensure_ascii=False) for r in reqs)


async def prove_guards(*, cli_path: str | None = None, timeout_s: float = 120) -> list[GuardCheck]:
    """Run the canary session; one GuardCheck per guard (``ok`` False with the evidence when it did not hold)."""
    from flower.core.roles import coordinator, worker
    from flower.core.runtime import Runtime

    with tempfile.TemporaryDirectory(prefix="flower-canary-") as tmp:
        root = Path(tmp)
        ws = _repo(root)
        spec = coordinator("协调者", "", {"coder": worker("写代码", "你写代码", isolate=True)})
        error = ""
        with ScriptedModel(_rules(ws)) as model:
            try:
                with model.environ():
                    runtime = Runtime(workspace=ws, run_dir=root / "run", workbench=True)
                    options = model.apply(runtime.options(spec))
                    if cli_path:
                        options.cli_path = cli_path
                    await asyncio.wait_for(model.collect("canary", options), timeout_s)
            except Exception as e:  # noqa: BLE001 - a CLI that breaks is a failed canary, with the reason
                error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            main, sub = _results(model, sub=False), _results(model, sub=True)
            seen = _seen(model.conversation)
        worktrees = [Path(line.split(" ", 1)[1]) for line in _git(ws, "worktree", "list", "--porcelain").splitlines()
                     if line.startswith("worktree ")]
        others = [w for w in worktrees if w.resolve() != ws.resolve()]
        spills = list((root / "run" / "workbench").rglob("spill/*"))
        first = main[0] if main else {}
        checks = [
            GuardCheck("the coordinator's Write is denied",
                       bool(first.get("is_error")) and "协调者不亲自动手" in str(first.get("text"))
                       and not (ws / "boss.txt").exists(),
                       "boss.txt written" if (ws / "boss.txt").exists() else str(first.get("text", "no result"))[:160]),
            GuardCheck("a worker's Write is allowed",
                       any((w / "canary.txt").is_file() for w in [ws, *others]),
                       "canary.txt written" if any((w / "canary.txt").is_file() for w in [ws, *others])
                       else str(sub[0].get("text", "the worker never ran") if sub else "the worker never ran")[:160]),
            GuardCheck("a big Bash output is spilled",
                       bool(spills) and any("已落盘到" in str(r.get("text")) for r in sub),
                       f"{len(spills)} spill file(s)"),
            GuardCheck("an isolated dispatch runs in its own git worktree",
                       len(others) == 1 and (others[0] / "canary.txt").is_file() and not (ws / "canary.txt").exists(),
                       f"worktrees: {[str(w) for w in others]}; in the shared checkout: {(ws / 'canary.txt').exists()}"),
            GuardCheck("setting_sources=[] keeps project settings and CLAUDE.md out",
                       MARKER not in seen and not (root / "project-hook-ran").exists() and bool(seen),
                       "CLAUDE.md reached the model" if MARKER in seen else
                       "a project hook ran" if (root / "project-hook-ran").exists() else "nothing read"),
        ]
        if error:
            checks.append(GuardCheck("the CLI session ran", False, error))
        return checks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flower.testing.canary", description=__doc__.split("\n")[0])
    p.add_argument("--cli", help="the Claude Code CLI to prove (default: the SDK's bundled one)")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    args = p.parse_args(argv)
    checks = asyncio.run(prove_guards(cli_path=args.cli))
    if args.json:
        print(json.dumps([asdict(c) for c in checks], ensure_ascii=False))
    else:
        for c in checks:
            print(f"{'✓' if c.ok else '✗'} {c.name}" + ("" if c.ok else f" — {c.detail}"))
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the hostile-run and gateway suites share: each tenant's canary secret, a deployment that carries it, and
the scripted flow whose worker runs one Bash script.
(A module of its own: ``from conftest import`` would find whichever conftest another directory loaded first.)"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from _service_helpers import Deployment  # noqa: E402
from flower.testing import Rule, say, tool  # noqa: E402
from sandbox.testing import ACHIEVED, BRIEF, CLARIFIER, GOAL, JUDGE, LEAD, REPORT  # noqa: E402

DONE = "PROBE-DONE"  # what a worker's script prints last: its tool result is the one the test reads
ENDED = ("succeeded", "failed", "aborted", "killed", "cancelled")
CANARY = {"acme": "canary-acme-5f1d0c9e2b", "beta": "canary-beta-7a3e41b8d6"}


def hostile_deployment(root: Path, backend: str) -> Deployment:
    extra = 'network_mode = "host"\n' if backend == "docker" else 'local_isolation = "bwrap"\n'
    dep = Deployment(root, backend=backend, extra_config=extra, max_running=4, quota=2)
    for name, repo in dep.repos.items():  # a secret in each team's repository and tenants' folders
        (repo / ".git" / "canary").write_text(CANARY[name] + "\n")
    return dep


def worker_rules(ask: str, script: str, *, lead_first: list[Rule] | None = None) -> list[Rule]:
    """clarify → goal → (``lead_first``) → the coordinator dispatches a worker whose Bash runs ``script`` → judge.
    Each run's coordinator is told its own ask, so two runs' rules never cross."""
    task = f"WORKER-TASK {ask}"
    brief = BRIEF.replace("做一个 hello.py", ask)
    return [
        # the scripted model reports no tokens unless told: the brief's usage is what the gateway meters
        Rule(say(brief, usage={"input_tokens": 1_000, "output_tokens": 100}), system=CLARIFIER, prompt=ask),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        *(lead_first or []),
        Rule(tool("Agent", {"description": "do it", "prompt": task, "subagent_type": "coder",
                            "run_in_background": False}), system=LEAD, agent=False, prompt=ask),
        Rule(tool("Bash", {"command": script, "description": "work", "timeout": 300000}), agent=True, prompt=task),
        Rule(say(REPORT), agent=True, prompt=task, result=DONE),
        Rule(say("完成"), system=LEAD, agent=False, result="写好了"),
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了"),
    ]

"""What the full guard set costs per tool call: in-process, and through the real CLI.

    python bench/hooks.py [--calls 40] [--rounds 2] [--reps 2000]

In-process: every callback a call would trigger (PreToolUse + PostToolUse, run
concurrently as the CLI does) on realistic hook inputs; median and p95 per tool,
target p95 <= 0.5 ms for every tool.
Through the CLI: a scripted session of `--calls` Bash calls (alternating a glance
and a 13 kB output that gets spilled), no hooks vs the full set, alternating
rounds in one run; per call = the interval between consecutive model requests.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from claude_agent_sdk import AgentDefinition, HookMatcher  # noqa: E402

from flower.core.agent import AgentSpec, build_options  # noqa: E402
from flower.core.guard import isolated, workbench_hooks  # noqa: E402
from flower.core.workbench import Workbench  # noqa: E402
from flower.testing import Request, Rule, ScriptedModel, say, tool  # noqa: E402

COMMANDS = ["ls", "seq 1 3000"]  # a glance the coordinator may run; an output over the threshold


def full_set(wb: Workbench) -> dict[str, list[HookMatcher]]:
    agents = {"coder": isolated(AgentDefinition("写代码", "你写代码")), "reader": AgentDefinition("读", "你读")}
    return workbench_hooks(wb, delegate_only=True, agents=agents, allow_glance=True)


def matching(hooks: dict[str, list[HookMatcher]], event: str, name: str) -> list[Any]:
    return [h for m in hooks.get(event, []) if m.matcher is None or re.fullmatch(m.matcher, name) for h in m.hooks]


def calls(ws: Path, wb: Workbench) -> list[tuple[str, dict[str, Any], Any, str | None]]:
    big = "".join(f"{i}\n" for i in range(1, 3001))
    bash = lambda out: {"stdout": out, "stderr": "", "interrupted": False, "isImage": False}  # noqa: E731
    return [
        ("Bash", {"command": "git status && git log -1"}, bash("On branch main\n"), None),
        ("Bash", {"command": "seq 1 3000"}, bash(big), "a1"),
        ("Read", {"file_path": str(ws / "src.py")}, {"type": "text", "file": {"content": "x = 1\n" * 50}}, "a1"),
        ("Write", {"file_path": str(wb.scripts / "run.sh"), "content": "# desc: 跑\n"}, {"type": "create"}, "a1"),
        ("Agent", {"description": "d", "prompt": "p", "subagent_type": "reader"}, {"status": "completed"}, None),
        ("Grep", {"pattern": "x", "path": str(ws)}, {"mode": "content", "content": "x" * 200}, "a1"),
    ]


async def in_process(reps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        wb = Workbench(ws).ensure()
        (wb.scripts / "run.sh").write_text("# desc: 跑\n")
        for hooks, label in (({}, "no hooks"), (full_set(wb), "full set")):
            per: list[float] = []
            by_tool: dict[str, list[float]] = {}
            for _ in range(reps):
                for name, inp, out, agent in calls(ws, wb):
                    base = {"session_id": "s", "transcript_path": "/t", "cwd": str(ws), "tool_name": name,
                            "tool_input": inp, "tool_use_id": "t1", **({"agent_id": agent, "agent_type": "coder"}
                                                                       if agent else {})}
                    t = time.perf_counter()
                    await asyncio.gather(*(h({**base, "hook_event_name": "PreToolUse"}, "t1", {})
                                           for h in matching(hooks, "PreToolUse", name)))
                    await asyncio.gather(*(h({**base, "hook_event_name": "PostToolUse", "tool_response": out}, "t1", {})
                                           for h in matching(hooks, "PostToolUse", name)))
                    per.append(time.perf_counter() - t)
                    by_tool.setdefault(name, []).append(per[-1])
            med = statistics.median(per) * 1e6
            p95 = statistics.quantiles(per, n=20)[-1] * 1e6
            print(f"in-process  {label:9s} median {med:8.1f} us/call   p95 {p95:8.1f} us/call   ({len(per)} calls)")
            for k, v in by_tool.items():
                print(f"            {k:6s} median {statistics.median(v) * 1e6:7.0f} us   "
                      f"p95 {statistics.quantiles(v, n=20)[-1] * 1e6:7.0f} us   target p95 <= 500 us")


def script(n: int, stamps: list[float]) -> list[Rule]:
    def answer(req: Request) -> Any:
        stamps.append(time.perf_counter())
        done = len(req.results and [m for m in req.messages if m.get("role") == "assistant"])
        if done >= n:
            return say("done")
        return tool("Bash", {"command": COMMANDS[done % 2], "description": "bench"})

    return [Rule(answer, agent=False, repeat=True)]


async def through_cli(n: int, rounds: int) -> None:
    intervals: dict[str, list[float]] = {"no hooks": [], "full set": []}
    walls: dict[str, list[float]] = {"no hooks": [], "full set": []}
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        wb = Workbench(ws)
        for _ in range(rounds):
            for label in ("no hooks", "full set"):
                stamps: list[float] = []
                spec = AgentSpec("bench", "", allowed_tools=["Bash", "Agent"], glance=True,
                                 hooks=full_set(wb) if label == "full set" else None)
                with ScriptedModel(script(n, stamps)) as model:
                    t = time.perf_counter()
                    msgs = await model.collect("bench", build_options(spec, cwd=ws))
                    walls[label].append(time.perf_counter() - t)
                assert getattr(msgs[-1], "result", None) == "done", msgs[-1]
                intervals[label] += [b - a for a, b in zip(stamps[1:], stamps[2:])]  # skip the first turn
    base = statistics.median(intervals["no hooks"])
    for label, xs in intervals.items():
        med = statistics.median(xs)
        print(f"real CLI    {label:9s} median {med * 1e3:8.2f} ms/call   ratio {med / base:5.3f}   "
              f"session {statistics.median(walls[label]):5.2f} s   ({len(xs)} calls)")
    added = statistics.median(intervals["full set"]) - base
    print(f"real CLI    added by the full set: {added * 1e3:+.2f} ms per tool call (median)")


async def main(n: int, rounds: int, reps: int) -> None:
    await in_process(reps)
    await through_cli(n, rounds)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2000)
    a = ap.parse_args()
    asyncio.run(main(a.calls, a.rounds, a.reps))

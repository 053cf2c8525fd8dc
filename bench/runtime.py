"""Runtime.run vs the raw SDK query() on the same 20-turn scripted step: wall-time ratio.

    python bench/runtime.py [--rounds 3]

Both sides run the real bundled CLI against the same scripted model, in one process,
alternating, so machine noise hits both. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from claude_agent_sdk import query  # noqa: E402

from flower.core.agent import AgentSpec, build_options  # noqa: E402
from flower.core.runtime import Runtime  # noqa: E402
from flower.testing import Rule, ScriptedModel, say, tool  # noqa: E402

TURNS = 20


def rules() -> list[Rule]:
    steps = [Rule(tool("Bash", {"command": f"echo turn-{i}", "description": "x"}),
                  when=lambda r, i=i: (f"turn-{i - 1}" in r.result_text) if i else not r.results)
             for i in range(TURNS - 1)]
    return steps + [Rule(say("finished"), result=f"turn-{TURNS - 2}", repeat=True)]


async def main(rounds: int) -> None:
    spec = AgentSpec("bench", "", allowed_tools=["Bash"], workbench=False)
    raw_t, rt_t = [], []
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        for n in range(rounds):
            with ScriptedModel(rules()) as model:
                os.environ.update(model.env)
                t = time.perf_counter()
                msgs = [m async for m in query(prompt=f"raw {n}", options=build_options(spec, cwd=ws))]
                raw_t.append(time.perf_counter() - t)
                assert getattr(msgs[-1], "result", None) == "finished", msgs[-1]
                raw_requests = len(model.conversation)
            with ScriptedModel(rules()) as model:
                os.environ.update(model.env)
                rt = Runtime(workspace=ws, run_dir=Path(tmp) / "runs")
                t = time.perf_counter()
                r = await rt.run(spec, f"runtime {n}")
                rt_t.append(time.perf_counter() - t)
                assert r.ok and r.text == "finished", r.error
                rt_requests = len(model.conversation)
    raw, flw = statistics.median(raw_t), statistics.median(rt_t)
    print(f"{TURNS}-turn step, {rounds} rounds, requests raw={raw_requests} runtime={rt_requests}")
    print(f"raw SDK query():  median {raw:.2f}s  ({', '.join(f'{x:.2f}' for x in raw_t)})")
    print(f"Runtime.run():    median {flw:.2f}s  ({', '.join(f'{x:.2f}' for x in rt_t)})")
    print(f"ratio Runtime/raw: {flw / raw:.3f}  (target <= 1.05)")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(p.parse_args().rounds))

"""How fast the scripted model serves: raw HTTP, and to the real CLI in a 20-turn session.

    python bench/scripted_model.py

The CLI figure is end to end (the CLI runs the tools too), the HTTP one is the
server alone with CLI-sized request bodies. Prints figures; asserts nothing.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.runtime import TURNS, rules  # noqa: E402
from flower.core.agent import AgentSpec, build_options  # noqa: E402
from flower.testing import Rule, ScriptedModel, say  # noqa: E402


def http_rate(n: int = 400, workers: int = 4) -> float:
    body = json.dumps({"model": "m", "stream": True, "tools": [{"name": "Read"}],
                       "messages": [{"role": "user", "content": "x" * 50_000}]}).encode()
    with ScriptedModel([Rule(say("ok"), repeat=True)]) as model:
        def one(_: int) -> None:
            req = urllib.request.Request(model.url + "/v1/messages", body, {"content-type": "application/json"})
            with urllib.request.urlopen(req) as resp:
                resp.read()
        t = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, range(n)))
        return n / (time.perf_counter() - t)


async def cli_rate() -> tuple[int, float]:
    with tempfile.TemporaryDirectory() as ws, ScriptedModel(rules()) as model:
        t = time.perf_counter()
        await model.collect("go", build_options(AgentSpec("b", "", allowed_tools=["Bash"]), cwd=ws))
        return len(model.conversation), time.perf_counter() - t


def main() -> None:
    rate = http_rate()
    n, wall = asyncio.run(cli_rate())
    print(f"raw HTTP, 50 KB bodies, 4 client threads: {rate:.0f} requests/s")
    print(f"real CLI, {TURNS}-turn Bash session: {n} requests in {wall:.2f}s = {n / wall:.1f} requests/s end to end")
    print(f"ratio server capacity / CLI demand: {rate / (n / wall):.0f}x")


if __name__ == "__main__":
    main()

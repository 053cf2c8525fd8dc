"""The guard canary at service start: runs are taken only once the guards are shown to hold for this CLI.

``flower.testing.canary`` runs in a subprocess of its own (its scripted model and CLI never share the
service's process or environment); until it has passed, queued runs wait; when it fails, the service
refuses runs — ``POST /v1/runs`` and ``/healthz`` answer 503 with the guards that did not hold.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable

from ..logging import get_logger
from .gate import Gate

__all__ = ["check", "prove_guards"]

log = get_logger("flower.service.canary")


async def prove_guards(*, cli_path: str = "", timeout_s: float = 300) -> str | None:
    """None when every guard held, else the sentence that explains why the service takes no runs."""
    argv = [sys.executable, "-m", "flower.testing.canary", "--json", *(["--cli", cli_path] if cli_path else [])]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return f"the guard canary did not finish in {timeout_s:.0f} s; the service takes no runs until it passes"
    try:
        checks = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " ".join(err.decode("utf-8", "replace").split())[-300:]
        return f"the guard canary crashed (exit {proc.returncode}: {tail}); the service takes no runs until it passes"
    for c in checks:
        log.info("canary.check", guard=c["name"], ok=c["ok"], detail=c["detail"])
    failed = [c for c in checks if not c["ok"]]
    if not failed:
        return None
    return ("the guards did not hold for this Claude Code CLI, so the service takes no runs: "
            + "; ".join(f"{c['name']}: no ({c['detail']})" for c in failed)
            + " — see `flower check --guards`")


async def check(gate: Gate, wake: Callable[[], None], cli_path: str = "") -> None:
    """Prove the guards, then open ``gate`` or refuse with the sentence; ``wake``: queued runs are looked at now."""
    why = await prove_guards(cli_path=cli_path)
    if why:
        gate.refuse(why)
        get_logger("flower.service").error("service.refusing_runs", reason=why)
    else:
        gate.open()
        get_logger("flower.service").info("canary.passed")
    wake()

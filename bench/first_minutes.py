"""The first ten minutes, measured: ``flower status`` against a bare interpreter, and what the finished-job,
``once`` and ``.git/info/exclude`` behaviours do, printed (asserts nothing).

    python bench/first_minutes.py

``status`` is timed as a user starts it (the installed script, a fresh process) in a folder after a whole
scripted starter flow, against ``python -c pass`` in the same run: the ratio is what flower adds. Also
printed: whether the SDK was imported on that path, what a bare ``flower`` does once the judge said achieved
(its exit code, and whether anything was spent), ``once``'s exit code when its only tool call is denied,
and the lines flower put in ``.git/info/exclude``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flower.core.credentials import LOOKUP_VARS  # noqa: E402
from flower.testing import Rule, ScriptedModel, say, starter_script, tool  # noqa: E402

BIN = Path(sys.executable).parent
RUNS = 7


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LOOKUP_VARS}
    return {**env, "HOME": str(home), "LANG": "C.UTF-8", **extra}


def _time(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="flower-bench-") as tmp:
        root = Path(tmp)
        home, repo = root / "home", root / "repo"
        home.mkdir()
        repo.mkdir()
        for cmd in (["init", "-q"], ["-c", "user.email=b@x", "-c", "user.name=b", "commit", "-q", "--allow-empty",
                                     "-m", "init"]):
            subprocess.run(["git", *cmd], cwd=repo, check=True, capture_output=True)
        with ScriptedModel(starter_script("make a hello.py")) as model:
            env = _env(home, model.env)
            t = time.perf_counter()
            go = subprocess.run([str(BIN / "flower"), "make a hello.py", "--timeout", "0"], cwd=repo, env=env,
                                capture_output=True, text=True, stdin=subprocess.DEVNULL)
            flow_s = time.perf_counter() - t
            rows = json.loads((repo / "runs" / "manifest.json").read_text())
            bare = subprocess.run([str(BIN / "flower")], cwd=repo, env=env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL)
            spent = len(json.loads((repo / "runs" / "manifest.json").read_text())) - len(rows)
        status_s = _time([str(BIN / "flower"), "status"], repo, env)
        python_s = _time([sys.executable, "-c", "pass"], repo, env)
        probe = subprocess.run([sys.executable, "-c", "import sys, runpy; sys.argv=['flower','status'];\n"
                                "from flower.cli import main\nmain(); print('SDK' if 'claude_agent_sdk' in sys.modules "
                                "else 'no SDK', file=sys.stderr)"], cwd=repo, env=env, capture_output=True, text=True)
        exclude = (repo / ".git" / "info" / "exclude").read_text().splitlines()
        porcelain = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout

        ws = root / "once"
        ws.mkdir()
        rules = [Rule(tool("Write", {"file_path": str(ws / "a.txt"), "content": "hi\n"}), prompt="write"),
                 Rule(say("could not"), result="", repeat=True)]
        with ScriptedModel(rules) as model:
            once = subprocess.run([str(BIN / "flower"), "once", "write a.txt"], cwd=ws, env=_env(home, model.env),
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL)

    print(f"starter flow through the real CLI (flower \"make a hello.py\" --timeout 0): exit {go.returncode}, "
          f"{flow_s:.1f} s")
    print(f"flower status (median of {RUNS} fresh processes): {status_s * 1000:.0f} ms; python -c pass: "
          f"{python_s * 1000:.0f} ms; ratio {status_s / python_s:.1f}x; on that path: {probe.stderr.strip()}")
    print(f"bare `flower` after the judge said achieved: exit {bare.returncode}, steps run {spent}, says: "
          f"{bare.stderr.strip()}")
    print(f"flower once whose only tool call was denied: exit {once.returncode}, says: {once.stderr.strip()}")
    print(f".git/info/exclude: {[x for x in exclude if not x.startswith('#')][-2:]}; git status --porcelain: "
          f"{porcelain.split()}")


if __name__ == "__main__":
    main()

"""Inside a setup container (``sandbox.prepare``): the team's setup commands, then what they left in the checkout.

``python -m sandbox.setup PLAN EGRESS_DIR`` — started from flower's runtime (``sandbox.runtime.argv``). The plan
(``plan.json``) names the checkout and the stages; ``secrets.json`` beside it holds the setup-only secrets, given
to the commands' environment alone (this process's own stays without them, so nothing of ours writes them
down). With an egress socket in ``EGRESS_DIR`` the commands reach the tenant's allow-list through it (the proxy
variables); without one they have no network at all.

Stages run one after another, the commands of one stage at once (the Dev Containers object form); each command's
output goes to this container's log under a ``$ name`` line. The first failure ends setup with its exit code.
Then everything the commands added to the checkout (``node_modules``, a build's output) moves to the seed
folder, which each run's runner copies into its own checkout (``plant``), and the checkout goes: a run has its own.

``plant(seed, workspace)`` — in a run's sandbox, before its flow: the seed's files where the checkout has none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["main", "plant", "SEED", "SEED_MARK"]

SEED = "/opt/flower-seed"
"""Where a prepared image keeps what setup left in the checkout."""
SEED_MARK = ".flower-seed"


def _environment(plan: dict[str, object], secrets: dict[str, str], egress_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()}
    extra = plan.get("env")
    if isinstance(extra, dict):
        env.update({str(k): str(v) for k, v in extra.items()})
    socket = egress_dir / "egress.sock"
    if socket.exists():
        from .egress import open_egress

        env.update(open_egress(socket))
    env.update(secrets)
    return env


def _run(name: str, command: str | list[str], cwd: str, env: dict[str, str], out: list[int]) -> None:
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
    print(f"$ {name + ': ' if name else ''}{command if isinstance(command, str) else ' '.join(argv)}", flush=True)
    try:
        code = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL).returncode
    except OSError as e:
        print(f"cannot run {argv[0]}: {e.strerror or e}", flush=True)
        code = 127
    out.append(code)


def _files(root: Path) -> set[str]:
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for n in dirnames + filenames:
            found.add(os.path.normpath(os.path.join(rel, n)))
    return found


def _move_new(workspace: Path, before: set[str], seed: Path) -> int:
    """Move what is new in ``workspace`` into ``seed`` (whole new folders at once); how many entries moved."""
    moved = 0
    for dirpath, dirnames, filenames in os.walk(workspace, topdown=True):
        rel = os.path.relpath(dirpath, workspace)
        keep: list[str] = []
        for n in dirnames + filenames:
            path = os.path.normpath(os.path.join(rel, n))
            if path in before or path == ".git" or path.startswith(".git/"):
                if n in dirnames:
                    keep.append(n)
                continue
            (seed / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(workspace / path), str(seed / path))
            moved += 1
        dirnames[:] = [d for d in dirnames if d in keep]
    return moved


def main(argv: list[str]) -> int:
    plan_file, egress_dir = Path(argv[0]), Path(argv[1])
    plan = json.loads(plan_file.read_text())
    secrets = json.loads((plan_file.parent / "secrets.json").read_text())
    workspace, seed = Path(plan["workspace"]), Path(plan["seed"])
    env = _environment(plan, secrets, egress_dir)
    before = _files(workspace)
    for stage in plan["stages"]:
        codes: list[int] = []
        threads = [threading.Thread(target=_run, args=(name, cmd, str(workspace), env, codes))
                   for name, cmd in stage.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = [c for c in codes if c != 0]
        if failed:
            print(f"setup failed: exit {failed[0]}", flush=True)
            return failed[0] if 0 < failed[0] < 256 else 1
    seed.mkdir(parents=True, exist_ok=True)
    if _move_new(workspace, before, seed):
        (seed / SEED_MARK).write_text("made by setup\n")
        os.chmod(seed, 0o755)
    shutil.rmtree(workspace.parent, ignore_errors=True)
    return 0


def plant(seed: Path, workspace: Path) -> int:
    """Copy the seed's files into ``workspace`` where it has none (a resumed run keeps what it changed); how many
    top-level entries came."""
    if not (seed / SEED_MARK).is_file():
        return 0
    planted = 0
    for entry in sorted(seed.iterdir()):
        if entry.name == SEED_MARK:
            continue
        target = workspace / entry.name
        if target.exists() or target.is_symlink():
            if entry.is_dir() and target.is_dir() and not target.is_symlink():
                shutil.copytree(entry, target, symlinks=True, dirs_exist_ok=True,
                                copy_function=_copy_absent)
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, symlinks=True)
        else:
            shutil.copy2(entry, target, follow_symlinks=False)
        planted += 1
    return planted


def _copy_absent(src: str, dst: str) -> str:
    if not os.path.lexists(dst):
        shutil.copy2(src, dst, follow_symlinks=False)
    return dst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

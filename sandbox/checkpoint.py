"""Inside the sandbox: commit the run's work on its branch and hand it back as a git bundle.

The run's checkout has a git dir of its own (``worktree.make_workspace``), so committing here touches
nothing of the team's repository. The bundle holds ``refs/heads/<branch>`` minus the base commit; the
service verifies it and fetches it with a git dir the run never saw. A symlink in the checkout is
committed as a symlink, never as the bytes of what it points at. The entrypoint checkpoints after every
step and once more at the end (or when it is stopped), so ``GET /diff`` of a live run shows its last
finished step. Plain ``git`` through subprocess: GitPython is not needed inside a run.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .errors import CheckpointError

__all__ = ["checkpoint", "CheckpointError", "AUTHOR"]

AUTHOR = ("flower", "flower@localhost")
_SAFE = ["core.hooksPath=/dev/null", "core.fsmonitor=false", "core.symlinks=true", "commit.gpgSign=false"]


def _git(workspace: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
           "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1],
           "GIT_COMMITTER_NAME": AUTHOR[0], "GIT_COMMITTER_EMAIL": AUTHOR[1]}
    cfg = [a for c in _SAFE for a in ("-c", c)]
    out = subprocess.run(["git", *cfg, "-C", str(workspace), *args], env=env, capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise CheckpointError(f"git {args[0]} failed: {(out.stderr or out.stdout).strip()[-400:]}")
    return out.stdout


def checkpoint(workspace: str | Path, bundle: str | Path, *, branch: str, base: str, message: str,
               changed_only: bool = False) -> str | None:
    """Commit everything changed in ``workspace`` onto ``branch``; write ``bundle`` (temp + rename) when the
    branch is past ``base``. Returns the branch's tip, or None when there is nothing past the base — or, with
    ``changed_only``, when nothing changed since the last commit (the bundle is not written again)."""
    ws, bundle = Path(workspace), Path(bundle)
    _git(ws, "add", "-A", ".")
    if _git(ws, "status", "--porcelain", "--untracked-files=no").strip():
        _git(ws, "commit", "-q", "--no-verify", "-m", message)
    elif changed_only:
        return None
    tip = _git(ws, "rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}").strip()
    if tip == base:
        return None
    tmp = bundle.with_name(f".{bundle.name}.{os.getpid()}.tmp")
    try:
        _git(ws, "bundle", "create", "-q", str(tmp), f"refs/heads/{branch}", f"^{base}")
        os.replace(tmp, bundle)
    finally:
        tmp.unlink(missing_ok=True)
    return tip

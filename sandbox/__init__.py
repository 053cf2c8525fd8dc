"""sandbox: where a run executes — its folder layout, git worktree, credentials file, spec, the in-container
entrypoint, and the backends that start it (local subprocess, Docker).

Dependencies point one way: service → sandbox → flower. Inside a run's container only ``layout``, ``spec``,
``envfile`` and ``entrypoint`` are imported (no GitPython, no docker SDK there).
"""

from __future__ import annotations

from typing import Any

_WHERE = {
    "RunLayout": "layout", "RunSpec": "spec", "SpecError": "spec", "write_spec": "spec", "read_spec": "spec",
    "write_env_file": "envfile", "read_env_file": "envfile",
    "add_worktree": "worktree", "remove_worktree": "worktree", "commit_all": "worktree", "diff": "worktree",
    "NotAGitRepo": "worktree", "BranchExists": "worktree", "WorktreeError": "worktree",
    "Backend": "backends", "BackendError": "backends", "LocalBackend": "backends", "DockerBackend": "backends",
}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    """Lazy: importing ``sandbox`` costs nothing, and GitPython/docker load only when used."""
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"sandbox.{mod}"), name)

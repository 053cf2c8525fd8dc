"""What the operator keeps on this machine for a tenant, checked when used: its env files (credentials, a push
token, setup secrets) and its repository."""

from __future__ import annotations

from pathlib import Path

from .errors import TenantNotReady

__all__ = ["operator_file", "check_git_repo"]


def operator_file(path: Path, what: str, error: type[Exception]) -> dict[str, str]:
    """An env file the operator keeps for a tenant (credentials, a push token): its values, or ``error`` with one
    sentence when it is missing or unreadable (never its contents)."""
    from sandbox.envfile import read_env_file

    if not path.is_file():
        if error is TenantNotReady:
            raise TenantNotReady(f"{what} is missing ({path}): create it (KEY=value lines, mode 0600) or fix its "
                                 "path in the tenants file", public=f"{what} is missing")
        raise error(f"{what} is missing ({path}); ask the operator to create it")
    try:
        return read_env_file(path)
    except (OSError, ValueError) as e:
        if error is TenantNotReady:
            raise TenantNotReady(f"{what} ({path}) cannot be read ({type(e).__name__}): fix it",
                                 public=f"{what} cannot be read") from None
        raise error(f"{what} ({path}) cannot be read ({type(e).__name__}); ask the operator to fix it") from None


def check_git_repo(repo: str, tenant: str) -> None:
    """A run needs a git repository (not a subfolder of one) whose HEAD names a commit."""
    import git

    path = Path(repo)

    def not_ready(why: str, fix: str) -> TenantNotReady:
        return TenantNotReady(f"the repository of tenant {tenant} ({path}) {why}; {fix}",
                              public=f"the repository of tenant {tenant} {why}")

    if not path.is_dir():
        raise not_ready("does not exist", "fix `repo` in the tenants file")
    try:
        r = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise not_ready("is not a git repository", "run `git init` and commit there, or fix `repo` in the tenants "
                                                   "file") from None
    try:
        if r.bare:
            raise not_ready("is bare", "it needs a work tree: point `repo` at a clone")
        if Path(r.working_tree_dir or "").resolve() != path.resolve():
            raise TenantNotReady(f"{path} (tenant {tenant}) is inside the git repository {r.working_tree_dir}, "
                                 "not its top; point `repo` at the top of the repository",
                                 public=f"the repository of tenant {tenant} is not the top of a git repository")
        try:
            r.head.commit
        except ValueError:
            raise not_ready("has no commit yet", "commit something first (runs branch from HEAD)") from None
    finally:
        r.close()

"""Pushing a succeeded run's branch to its tenant's git remote (``push_url``), with a credential only the service
holds.

The branch is in the tenant's own repository once the run's bundle was imported (``sandbox.worktree``); the push
runs there, by the service, with the git setup every other git command of the service uses (``SAFE_CONFIG``,
``GIT_ENV``: no system or global config, no hooks, no prompts) plus: only the push URL's protocol allowed, no
redirects followed (a credential goes to the host named and no other), and the credential handed to git by a
credential helper that reads it from git's own environment — never on a command line, in a URL, in a file of the
run's or in a log. What git says when it fails is passed on with the credential cut out.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from sandbox.worktree import GIT_ENV, SAFE_CONFIG

from ..clock import SYSTEM, Clock
from ..errors import PushFailed
from ..registry import Push, Run
from ..tenants import PushTarget, Tenant, operator_file

__all__ = ["PushFailed", "push_branch", "push_run", "push_due"]

PUSH_TIMEOUT_S = 300
# the helper answers git's "get" with what FLOWER_PUSH_USERNAME / FLOWER_PUSH_TOKEN hold in git's environment
_HELPER = ('!f() { test "$1" = get || exit 0; printf "username=%s\\npassword=%s\\n" "$FLOWER_PUSH_USERNAME" '
           '"$FLOWER_PUSH_TOKEN"; }; f')


def push_due(run: Run, tenant: Tenant | None) -> bool:
    """A run's branch is pushed when it succeeded with work of its own and its tenant names a push_url."""
    return (tenant is not None and tenant.push is not None and run.status == "succeeded" and bool(run.branch)
            and run.commit_sha is not None and run.commit_sha != run.base)


def _credentials(tenant: str, target: PushTarget) -> tuple[str, str]:
    path = Path(target.credentials_file)
    values = operator_file(path, f"the push credentials file of tenant {tenant}", PushFailed)
    username, token = values.get("username", ""), values.get("token", "")
    if not username or not token or any(c in username + token for c in "\r\n\0"):
        raise PushFailed(f"the push credentials file of tenant {tenant} ({path}) needs a `username=` and a "
                         "`token=` line; ask the operator to add them")
    return username, token


def push_branch(repo: str, commit: str, ref: str, url: str, username: str, token: str) -> None:
    """Blocking: push ``commit`` of ``repo`` to ``ref`` at ``url`` (no force: a remote branch that moved elsewhere
    is refused). PushFailed with git's reason, the credential cut out."""
    scheme = urlsplit(url).scheme
    config = [*SAFE_CONFIG, f"protocol.{scheme}.allow=always", "http.followRedirects=false",
              "credential.helper=", f"credential.helper={_HELPER}", "credential.interactive=false"]
    argv = ["git", *[a for c in config for a in ("-c", c)], "-C", repo, "push", "--quiet", "--no-verify", url,
            f"{commit}:{ref}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SSH_ASKPASS"))}
    env.update(GIT_ENV, GIT_ASKPASS="", FLOWER_PUSH_USERNAME=username, FLOWER_PUSH_TOKEN=token)
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, timeout=PUSH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PushFailed(f"git push to {url} took longer than {PUSH_TIMEOUT_S} s") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).replace(token, "***").split())
        hint = "; check the username and token in push_credentials_file" if "Authentication failed" in said else ""
        raise PushFailed(f"git push to {url} failed: {said[-400:] or f'exit code {done.returncode}'}{hint}")


def push_run(run: Run, tenant: Tenant, attempts: int = 0, clock: Clock = SYSTEM) -> Push:
    """Blocking: push the run's branch to its tenant's push_url; the outcome as the run's row keeps it."""
    assert tenant.push is not None and run.branch and run.commit_sha
    ref = f"refs/heads/{run.branch}"
    outcome = Push(state="pushed", url=tenant.push.url, ref=ref, commit=run.commit_sha, attempts=attempts + 1)
    try:
        username, token = _credentials(tenant.name, tenant.push)
        push_branch(run.repo, run.commit_sha, ref, tenant.push.url, username, token)
    except PushFailed as e:
        outcome.state, outcome.error = "failed", str(e)
    outcome.at = clock.now()
    return outcome

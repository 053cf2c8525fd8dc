"""Pushing a succeeded run's branch to its tenant's git remote (``push_url``), with a credential only the service
holds.

The branch is in the tenant's own repository once the run's bundle was imported (``sandbox.worktree``); the push
runs there, by the service, with the git setup every other git command of the service uses (``SAFE_CONFIG``,
``GIT_ENV``: no system or global config, no hooks, no prompts) plus: only the push URL's protocol allowed, no
redirects followed (a credential goes to the host named and no other), and the credential handed to git by a
credential helper that reads it from git's own environment — never on a command line, in a URL, in a file of the
run's or in a log. What git says when it fails is passed on with the credential cut out.

Over ssh (``push_url = "ssh://…"``) the credential is a deploy key the operator keeps for the tenant
(``push_ssh_key_file``), passed to ssh by path — never copied, never near a run's folder — and the server is
known only by the host keys in ``push_known_hosts_file`` (``StrictHostKeyChecking=yes``: nothing learnt on first
sight); ssh reads no config, agent or ``~/.ssh`` of the service's user (``ssh_command``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from sandbox.worktree import GIT_ENV, SAFE_CONFIG

from ..clock import SYSTEM, Clock
from ..errors import PushFailed
from ..registry import Push, Run
from ..operator_files import operator_file
from ..tenants import PushTarget, Tenant

__all__ = ["PushFailed", "push_branch", "push_run", "push_due", "ssh_command"]

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


def ssh_command(key_file: str, known_hosts_file: str) -> str:
    """The ssh git runs for an ssh push: this deploy key only (no agent, no ~/.ssh, no ssh config), the host keys
    in ``known_hosts_file`` only (an unknown or changed host key is refused, never learnt), never a prompt."""
    return shlex.join(["ssh", "-F", "/dev/null", "-i", key_file, "-o", "IdentitiesOnly=yes",
                       "-o", "IdentityAgent=none", "-o", f"UserKnownHostsFile={known_hosts_file}",
                       "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes",
                       "-o", "UpdateHostKeys=no", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30"])


def _check_key(tenant: str, key: Path, known_hosts: Path) -> None:
    """The deploy key and the pinned host keys are there, and the key is the service's alone (ssh refuses one
    others can read)."""
    for path, what in ((key, "push_ssh_key_file"), (known_hosts, "push_known_hosts_file")):
        if not path.is_file():
            raise PushFailed(f"the {what} of tenant {tenant} ({path}) is missing; ask the operator to create it")
    if key.stat().st_mode & 0o077:
        raise PushFailed(f"the push_ssh_key_file of tenant {tenant} ({key}) is readable by others; ask the operator "
                         "to `chmod 600` it")


def push_branch(repo: str, commit: str, ref: str, url: str, username: str = "", token: str = "", *,
                ssh: str | None = None) -> None:
    """Blocking: push ``commit`` of ``repo`` to ``ref`` at ``url`` (no force: a remote branch that moved elsewhere
    is refused) — over https with ``username``/``token``, over ssh with the command ``ssh`` (``ssh_command``).
    PushFailed with git's reason, the credential cut out."""
    scheme = urlsplit(url).scheme
    config = [*SAFE_CONFIG, f"protocol.{scheme}.allow=always", "http.followRedirects=false",
              "credential.helper=", f"credential.helper={_HELPER}", "credential.interactive=false"]
    argv = ["git", *[a for c in config for a in ("-c", c)], "-C", repo, "push", "--quiet", "--no-verify", url,
            f"{commit}:{ref}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SSH_"))}
    env.update(GIT_ENV, GIT_ASKPASS="", FLOWER_PUSH_USERNAME=username, FLOWER_PUSH_TOKEN=token)
    if ssh is not None:
        env["GIT_SSH_COMMAND"] = ssh
        env["GIT_SSH_VARIANT"] = "ssh"
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, timeout=PUSH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PushFailed(f"git push to {url} took longer than {PUSH_TIMEOUT_S} s") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).replace(token or "\0", "***").split())
        hint = "; check the username and token in push_credentials_file" if "Authentication failed" in said else ""
        if "Host key verification failed" in said:
            hint = "; the server's host key is not the one in push_known_hosts_file: check it with the git host"
        elif "Permission denied (publickey" in said:
            hint = "; the git host does not accept the deploy key in push_ssh_key_file: add its .pub there"
        raise PushFailed(f"git push to {url} failed: {said[-400:] or f'exit code {done.returncode}'}{hint}")


def push_run(run: Run, tenant: Tenant, attempts: int = 0, clock: Clock = SYSTEM) -> Push:
    """Blocking: push the run's branch to its tenant's push_url; the outcome as the run's row keeps it."""
    assert tenant.push is not None and run.branch and run.commit_sha
    ref = f"refs/heads/{run.branch}"
    outcome = Push(state="pushed", url=tenant.push.url, ref=ref, commit=run.commit_sha, attempts=attempts + 1)
    try:
        if tenant.push.ssh_key_file:
            _check_key(tenant.name, Path(tenant.push.ssh_key_file), Path(tenant.push.known_hosts_file))
            push_branch(run.repo, run.commit_sha, ref, tenant.push.url,
                        ssh=ssh_command(tenant.push.ssh_key_file, tenant.push.known_hosts_file))
        else:
            username, token = _credentials(tenant.name, tenant.push)
            push_branch(run.repo, run.commit_sha, ref, tenant.push.url, username, token)
    except PushFailed as e:
        outcome.state, outcome.error = "failed", str(e)
    outcome.at = clock.now()
    return outcome

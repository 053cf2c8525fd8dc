"""Pushing a run's branch over ssh (issue 35): a real sshd on 127.0.0.1, a bare repository behind it, a deploy key
the service holds and the server's host key pinned in a known_hosts file. No host key is learnt on first sight,
no agent or ~/.ssh of the service's user is used, and each way it can go wrong is said in one sentence."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _service_helpers import git, make_repo
from service.registry import Run
from service.results.push import push_run
from service.tenants import TenantError, Tenants

SSHD = "/usr/sbin/sshd"


def _need(what: str) -> None:
    if os.environ.get("FLOWER_REQUIRE_DOCKER") == "1":
        pytest.fail(f"FLOWER_REQUIRE_DOCKER=1 but {what}")
    pytest.skip(f"{what} (apt-get install openssh-server; FLOWER_REQUIRE_DOCKER=1 makes this a failure)")


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path


class Sshd:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.host_key = _keygen(root / "host_key")
        self.authorized = root / "authorized_keys"
        self.authorized.write_text("")
        self.authorized.chmod(0o600)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = root / "sshd_config"
        config.write_text(f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\n"
                          f"PidFile {root / 'sshd.pid'}\nAuthorizedKeysFile {self.authorized}\n"
                          "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                          "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL,
                                     stderr=open(root / "sshd.log", "wb"))
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, (root / "sshd.log").read_text()
                time.sleep(0.05)

    def known_hosts(self, path: Path, key: Path | None = None) -> Path:
        """A known_hosts file pinning ``key`` (default: this server's own host key) for this server."""
        kind, blob = (key or self.host_key).with_suffix(".pub").read_text().split()[:2]
        path.write_text(f"[127.0.0.1]:{self.port} {kind} {blob}\n")
        return path

    def authorize(self, key: Path) -> None:
        with self.authorized.open("a") as f:
            f.write(key.with_suffix(".pub").read_text())


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    if not Path(SSHD).is_file() or shutil.which("ssh") is None:
        _need("no sshd on this machine")
    if os.geteuid() != 0:
        _need("sshd for the test runs as root (its privilege separation)")
    server = Sshd(tmp_path / "sshd")
    try:
        yield server
    finally:
        server.proc.terminate()
        server.proc.wait(10)


def _tenant(tmp_path: Path, repo: Path, url: str, **files: Path) -> Tenants:
    lines = ['[[tenant]]', 'name = "acme"', 'token = "acme-token-0123456789abcdef"', f'repo = "{repo}"',
             f'credentials = "{tmp_path / "acme.env"}"', f'push_url = "{url}"',
             *[f'{k} = "{v}"' for k, v in files.items()]]
    path = tmp_path / "tenants.toml"
    path.write_text("\n".join(lines) + "\n")
    return Tenants(path)


def _run(repo: Path, name: str) -> Run:
    git(repo, "checkout", "-qb", f"flower/{name}")
    (repo / f"{name}.txt").write_text("the run's work\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", f"work of {name}")
    sha = git(repo, "rev-parse", "HEAD").strip()
    base = git(repo, "rev-parse", "main").strip()
    git(repo, "checkout", "-q", "main")
    return Run(id=name, tenant="acme", ask="x", options={}, status="succeeded", repo=str(repo),
               branch=f"flower/{name}", base=base, commit_sha=sha, created=0.0)


def test_a_runs_branch_is_pushed_over_ssh_with_the_deploy_key_and_only_to_the_pinned_host(
        sshd: Sshd, tmp_path: Path):
    repo = make_repo(tmp_path / "acme")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    key = _keygen(secrets / "deploy_key")
    sshd.authorize(key)
    pinned = sshd.known_hosts(secrets / "known_hosts")
    url = f"ssh://root@127.0.0.1:{sshd.port}{remote}"
    tenant = _tenant(tmp_path, repo, url, push_ssh_key_file=key, push_known_hosts_file=pinned).get("acme")
    assert tenant is not None and tenant.push is not None

    first = _run(repo, "run-1")
    pushed = push_run(first, tenant)
    assert pushed.state == "pushed" and pushed.error is None, pushed
    assert git(remote, "rev-parse", "refs/heads/flower/run-1").strip() == first.commit_sha
    assert not list(Path(first.repo).glob("**/deploy_key*")), "the key is never copied near the repository"

    # a server whose host key is not the pinned one is never pushed to (nothing learnt on first sight)
    impostor = sshd.known_hosts(secrets / "impostor_hosts", _keygen(secrets / "other_host_key"))
    other = _tenant(tmp_path, repo, url, push_ssh_key_file=key, push_known_hosts_file=impostor).get("acme")
    assert other is not None
    second = _run(repo, "run-2")
    refused = push_run(second, other)
    assert refused.state == "failed" and "not the one in push_known_hosts_file" in (refused.error or ""), refused
    assert impostor.read_text().count("\n") == 1, "nothing was added to the pinned hosts"

    # a deploy key the server does not know, and a key others can read: each said in a sentence, nothing pushed
    stranger = _keygen(secrets / "stranger_key")
    unknown = _tenant(tmp_path, repo, url, push_ssh_key_file=stranger, push_known_hosts_file=pinned).get("acme")
    assert unknown is not None
    said = push_run(second, unknown).error or ""
    assert "does not accept the deploy key in push_ssh_key_file" in said, said
    stranger.chmod(0o644)
    said = push_run(second, unknown).error or ""
    assert "is readable by others; ask the operator to `chmod 600` it" in said, said
    listed = git(remote, "for-each-ref", "--format=%(refname)").split()
    assert listed == ["refs/heads/flower/run-1"], listed


@pytest.mark.parametrize("files, said", [
    ({"push_ssh_key_file": "k"}, "without `push_known_hosts_file`"),
    ({"push_known_hosts_file": "h"}, "without `push_ssh_key_file`"),
    ({"push_ssh_key_file": "k", "push_known_hosts_file": "h", "push_credentials_file": "c"},
     "uses `push_ssh_key_file` and `push_known_hosts_file` instead"),
])
def test_an_ssh_push_url_needs_its_key_and_pinned_host_keys(tmp_path: Path, files: dict[str, str], said: str):
    repo = make_repo(tmp_path / "acme")
    with pytest.raises(TenantError) as e:
        _tenant(tmp_path, repo, "ssh://git@git.example/acme.git", **{k: tmp_path / v for k, v in files.items()})
    assert said in str(e.value), e.value

"""A real image registry on 127.0.0.1 for the push tests: Docker's distribution from Debian's packages.

**docker-registry 2.8.2** (``apt-get install docker-registry``; the package does not start it here — no init
system), started as ``docker-registry serve <root>/config.yml`` on a free port, storage in ``<root>/data``. What
worked:
- ``auth: {htpasswd: {realm, path}}`` over plain HTTP: the registry only logs that TLS is advised. The file must
  hold bcrypt hashes (``$2y$``/``$2b$``); Python's ``crypt`` module (glibc's libxcrypt, 3.11 here; gone in 3.13)
  makes them, as ``htpasswd -B`` would.
- Docker's engine treats ``127.0.0.0/8`` as an insecure registry by default (``docker info``: Insecure
  Registries), so a push to ``127.0.0.1:<port>`` speaks HTTP with no daemon setting; without a login it ends with
  the stream's error "no basic auth credentials", with a wrong one "unauthorized: authentication required".
- ``GET /v2/<name>/manifests/<tag>`` with ``Accept: application/vnd.docker.distribution.manifest.v2+json`` answers
  the manifest and its ``Docker-Content-Digest``: the digest the push reported.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

BINARY = "docker-registry"
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


@dataclass(frozen=True)
class ImageRegistry:
    host: str
    """``127.0.0.1:<port>``: what an image reference starts with."""
    user: str
    password: str

    def login(self) -> str:
        """A Docker config.json that logs in to this registry (a ``.dockerconfigjson``)."""
        auth = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return '{"auths": {"%s": {"auth": "%s"}}}' % (self.host, auth)

    def digest(self, name: str, tag: str) -> str | None:
        """The digest the registry holds for ``name:tag``, or None when it has none."""
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        req = urllib.request.Request(f"http://{self.host}/v2/{name}/manifests/{tag}", method="HEAD",
                                     headers={"Accept": MANIFEST, "Authorization": f"Basic {token}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return str(resp.headers["Docker-Content-Digest"])
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise


def registry_binary() -> str:
    """The registry's binary; without it a Docker test fails under FLOWER_REQUIRE_DOCKER=1, else skips."""
    found = shutil.which(BINARY)
    if found:
        return found
    why = f"no {BINARY} on PATH: apt-get install docker-registry (Docker's distribution, Debian's package)"
    if os.environ.get("FLOWER_REQUIRE_DOCKER") == "1":
        pytest.fail(why)
    pytest.skip(why)


def _bcrypt(password: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving_registry(root: Path) -> Iterator[ImageRegistry]:
    """A registry with one user on 127.0.0.1, its data under ``root``; stopped (and waited for) on exit."""
    binary = registry_binary()
    user, password = "flower", secrets.token_urlsafe(12)
    (root / "htpasswd").write_text(f"{user}:{_bcrypt(password)}\n")
    port = _free_port()
    (root / "config.yml").write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
        f"http: {{addr: 127.0.0.1:{port}, secret: {secrets.token_hex(16)}}}\n"
        f"auth: {{htpasswd: {{realm: flower-test, path: {root / 'htpasswd'}}}}}\n")
    log = (root / "registry.log").open("wb")
    proc = subprocess.Popen([binary, "serve", str(root / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30  # a readiness wait, not a measurement
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)
            except urllib.error.HTTPError as e:
                if e.code == 401:  # up, and asking for the login
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{binary} did not come up: {(root / 'registry.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield ImageRegistry(f"127.0.0.1:{port}", user, password)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()

"""Real package registries on 127.0.0.1 for the team-environment tests: an npm registry and a Python index.

Both hold a private package behind a login, so a team's setup must present a secret (the "setup-only secret"
of issue 34) to install it; both are started once per test session (``npm_registry``, ``package_index``) and
stopped with it. Outside pytest (a benchmark) use ``serving_npm_registry(root)`` / ``serving_package_index(root)``.

**npm: verdaccio 6.8.0** from the npm registry, installed once per machine with
``npm install --prefix ~/.cache/flower-tests/verdaccio-6.8.0 --omit=dev verdaccio@6.8.0`` (14 s, 327 packages,
58 MB; a file lock keeps two sessions from installing at once) and started as
``node …/node_modules/verdaccio/bin/verdaccio --config <root>/config.yaml`` (up, user made and package published
in about 3 s). It declares ``engines: node >=20`` and logs "recommends Node.js v22" and "don't run it under root":
both harmless here (Node 20.20); on Debian bookworm's own Node 18.20 (what ``.ci/run`` installs on a fresh
machine) it was seen to start and register a user, nothing more was tried. What worked:
- config keys: ``storage: <dir>``, ``auth: {htpasswd: {file: <root>/htpasswd, max_users: 1}}``, ``uplinks: {}``
  (nothing is proxied to the public registry: a package not published here is a 404), ``packages:`` with
  ``'@team/*'`` and ``'**'`` both ``access: $authenticated`` and ``publish: $authenticated`` (no ``proxy:`` key),
  ``listen: 127.0.0.1:<port>``, ``web: {enable: false}``, ``log: {type: stdout, format: json, level: warn}``.
  No ``middlewares: audit`` (it would forward ``npm audit`` to registry.npmjs.org; without it audit is a 404
  that npm shrugs off).
- the user: ``PUT /-/user/org.couchdb.user:<name>`` with ``{"name", "password"}`` registers it in the htpasswd
  file (bcrypt) and answers ``201 {"token": …}`` (verdaccio's legacy token: no ``security:`` key needed);
  ``max_users: 1`` then refuses any other sign-up (403 "maximum amount of users reached"). A short password is
  a 400 ("does not pass the validation").
- a client: a project ``.npmrc`` with ``@team:registry=http://127.0.0.1:<port>/`` and
  ``//127.0.0.1:<port>/:_authToken=${NPM_TOKEN}`` — npm expands the variable when it reads the file, so the
  token lives only in the setup's environment, never in a file. Without the token npm answers ``E401`` (an
  anonymous read of a ``$authenticated`` package is a 401 "authorization required to access package", not a
  404). With ``NPM_TOKEN`` unset npm sends ``${NPM_TOKEN}`` as it is (E401 on install) and otherwise still runs:
  ``npm test`` in an agent phase without the secret works.
- ``npm publish`` of a scoped package needs nothing more (no ``--access``); the fixture uses its own
  ``--userconfig`` and ``--cache`` so nothing of ``~/.npmrc`` or ``~/.npm`` takes part.
- the port is chosen per session: tarball URLs in the registry's answers follow the request's Host, so a
  lockfile written in one session names that session's port (write lockfiles in the test, not in the tree).

**Python: pypiserver 2.4** (PyPI; with passlib for the htpasswd file, both in the ``dev`` extra), started as
``python -m pypiserver run -i 127.0.0.1 -p <port> -a download,list,update -P <root>/htpasswd
--disable-fallback --hash-algo sha256 <root>/packages`` (up in under 1 s). What worked:
- ``--disable-fallback`` matters: by default a name the index does not hold is a 303 to
  https://pypi.org/simple/<name>/ (seen here), which pip would follow.
- ``-a download,list,update``: every read needs the login (``-a download`` alone would still show the listing).
- the htpasswd file is written with ``passlib.apache.HtpasswdFile(default_scheme="apr_md5_crypt")``.
- a client: ``pip install --index-url http://<user>:<password>@127.0.0.1:<port>/simple/ teamcalc`` (or
  ``PIP_INDEX_URL``); without the login pip gets 401 and reports "No matching distribution found" — or, without
  ``--no-input``, stops to ask for a user name (an EOFError where there is no terminal).
- the default server (bottle's wsgiref) answers one request at a time: enough for these tests.
- the fixture's wheel is written directly (a zip with the module and a ``.dist-info``: METADATA, WHEEL,
  RECORD): no build backend, no network. ``pytest`` and its dependencies are downloaded once per machine
  (``pip download --only-binary=:all: --python-version 3.11 pytest==9.2.0``) into
  ``~/.cache/flower-tests/pytest-wheels-…`` and served too, so a team project can run ``pytest -q``.
- Debian bookworm's python3 is "externally managed" (PEP 668): a team's setup installs into a venv
  (``python3 -m venv .venv && .venv/bin/pip install …``), not into the system's python.

Clients in these tests ignore the machine's own settings (``PIP_CONFIG_FILE=/dev/null``, no ``PIP_*`` variables;
an npm ``--userconfig`` of our own): a local wheel mirror must not make "refused" look like "installed".
"""

from __future__ import annotations

import base64
import csv
import fcntl
import hashlib
import io
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

VERDACCIO_VERSION = "6.8.0"
PYTEST_SPEC = "pytest==9.2.0"  # what the team images' python (3.11) runs a team's tests with
TEAM_PYTHON = "3.11"
NPM_PACKAGE, NPM_VERSION = "@team/greet", "1.0.0"
PY_PACKAGE, PY_VERSION = "teamcalc", "1.0.0"
START_TIMEOUT = 60.0  # seconds for a server to answer (a cold machine, two cores)


class RegistryDidNotStart(RuntimeError):
    pass


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/flower-tests`` (``~/.cache/flower-tests``): what is downloaded once per machine."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    root = base / "flower-tests"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """One process at a time fills a cache entry (other sessions on this machine wait)."""
    with open(cache_root() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(cmd: list[str], what: str, *, cwd: Path | None = None,
         env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)
    if done.returncode != 0:
        raise RegistryDidNotStart(f"{what} failed (exit {done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
    return done


def need_node() -> None:
    """Fail (never skip) with the fix when node or npm is missing: the npm registry runs on Node."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not found: the npm registry tests need Node.js and npm "
                    "(apt-get install nodejs npm; .ci/run does it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- a server process ------------------------------------------------------------------------------------
@dataclass
class _Process:
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def stop(self) -> None:
        """Its whole process group goes (npm-started node children included); nothing is left listening."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass


def _spawn(cmd: list[str], log: Path, cwd: Path, env: Mapping[str, str] | None = None) -> _Process:
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=dict(env) if env is not None else None)
    return _Process(proc, log)


def _wait_answering(server: _Process, url: str, what: str) -> None:
    """Until ``url`` answers at all (any HTTP status); a server that exits first is an error with its log."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if server.proc.poll() is not None:
            raise RegistryDidNotStart(f"{what} exited with {server.proc.returncode} before answering:\n"
                                      f"{server.tail()}")
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return
        except urllib.error.HTTPError:
            return  # it answers (a 401 is an answer)
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise RegistryDidNotStart(f"{what} did not answer {url} within {START_TIMEOUT:.0f}s:\n"
                                          f"{server.tail()}") from None
            time.sleep(0.1)


def _request(method: str, url: str, body: object, headers: Mapping[str, str] | None = None) -> dict[str, object]:
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer: dict[str, object] = json.loads(resp.read())
        return answer


# -- npm: verdaccio --------------------------------------------------------------------------------------
def verdaccio_bin(version: str = VERDACCIO_VERSION) -> Path:
    """verdaccio's start script, installed from the npm registry once per machine (by version)."""
    prefix = cache_root() / f"verdaccio-{version}"
    script = prefix / "node_modules" / "verdaccio" / "bin" / "verdaccio"
    if script.is_file():
        return script
    with cache_lock(f"verdaccio-{version}"):
        if script.is_file():  # another session installed it while this one waited
            return script
        staging = Path(tempfile.mkdtemp(prefix=f".verdaccio-{version}-", dir=cache_root()))
        try:
            _run(["npm", "install", "--prefix", str(staging), "--omit=dev", "--no-audit", "--no-fund",
                  "--no-save", f"verdaccio@{version}"], f"npm install verdaccio@{version}")
            shutil.rmtree(prefix, ignore_errors=True)
            staging.rename(prefix)  # whole or not at all: an interrupted install is never taken for one
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return script


@dataclass(frozen=True)
class NpmRegistry:
    """A running verdaccio: ``token`` reads (and publishes) the ``scope``'s packages; anonymous reads are 401."""

    host: str
    port: int
    user: str
    password: str
    token: str
    scope: str
    package: str
    version: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def npmrc(self, token_var: str = "NPM_TOKEN") -> str:
        """A project's ``.npmrc``: the scope from this registry, the token read from ``$token_var`` by npm."""
        return f"{self.scope}:registry={self.url}\n//{self.host}:{self.port}/:_authToken=${{{token_var}}}\n"

    def secrets(self) -> tuple[str, ...]:
        """What must never reach an agent phase (its environment, files, /proc, the prepared image)."""
        return (self.token, self.password)


def _package_files(name: str, version: str) -> dict[str, str]:
    return {
        "package.json": json.dumps({"name": name, "version": version, "main": "index.js", "license": "MIT",
                                    "description": "a team's private package (flower's tests)"}, indent=2),
        "index.js": "exports.greet = (name) => `hello, ${name}`;\n",
    }


def npm_env(home: Path, userconfig: Path | None = None, **extra: str) -> dict[str, str]:
    """An environment for npm that reads no config of this machine's (``~/.npmrc``) and has its own cache."""
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("npm_config_")}
    home.mkdir(parents=True, exist_ok=True)
    if userconfig is None:
        userconfig = home / "npmrc"
        userconfig.touch()
    env.update(HOME=str(home), NPM_CONFIG_USERCONFIG=str(userconfig), NPM_CONFIG_CACHE=str(home / "npm-cache"),
               NPM_CONFIG_UPDATE_NOTIFIER="false", NPM_CONFIG_FUND="false", NPM_CONFIG_AUDIT="false")
    env.update(extra)
    return env


def _verdaccio_config(root: Path, port: int) -> str:
    rules = "\n".join(f"  '{pattern}':\n    access: $authenticated\n    publish: $authenticated\n"
                      f"    unpublish: $authenticated" for pattern in ("@team/*", "**"))
    return (f"storage: {root / 'storage'}\n"
            f"auth:\n  htpasswd:\n    file: {root / 'htpasswd'}\n    max_users: 1\n"
            "uplinks: {}\n"
            f"packages:\n{rules}\n"
            f"listen: 127.0.0.1:{port}\n"
            "web:\n  enable: false\n"
            "log: {type: stdout, format: json, level: warn}\n")


def _start_verdaccio(root: Path) -> tuple[_Process, int]:
    script = verdaccio_bin()
    for _ in range(3):  # a port taken between choosing and listening: choose again
        port = free_port()
        config = root / "config.yaml"
        config.write_text(_verdaccio_config(root, port))
        server = _spawn(["node", str(script), "--config", str(config)], root / "verdaccio.log", root,
                        env=npm_env(root / "home"))
        try:
            _wait_answering(server, f"http://127.0.0.1:{port}/-/ping", "verdaccio")
            return server, port
        except RegistryDidNotStart:
            server.stop()
            if "EADDRINUSE" not in server.tail():
                raise
    raise RegistryDidNotStart("verdaccio found no free port in three tries")


@contextmanager
def serving_npm_registry(root: Path, *, scope: str = "@team", package: str = NPM_PACKAGE,
                         version: str = NPM_VERSION) -> Iterator[NpmRegistry]:
    """verdaccio on 127.0.0.1 with one user and ``package@version`` published; stopped on exit."""
    root.mkdir(parents=True, exist_ok=True)
    server, port = _start_verdaccio(root)
    try:
        user, password = "team", f"setup-only-{secrets.token_hex(16)}"
        answer = _request("PUT", f"http://127.0.0.1:{port}/-/user/org.couchdb.user:{user}",
                          {"name": user, "password": password, "type": "user", "roles": []})
        token = str(answer["token"])
        registry = NpmRegistry("127.0.0.1", port, user, password, token, scope, package, version)
        source = root / "publish" / package.replace("/", "+")
        source.mkdir(parents=True)
        for name, text in _package_files(package, version).items():
            (source / name).write_text(text)
        (source / ".npmrc").write_text(registry.npmrc())
        _run(["npm", "publish", "--registry", registry.url], f"npm publish {package}@{version}", cwd=source,
             env=npm_env(root / "home", NPM_TOKEN=token))
        yield registry
    finally:
        server.stop()


@pytest.fixture(scope="session")
def npm_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NpmRegistry]:
    """A real npm registry (verdaccio) on 127.0.0.1 for the session, ``@team/greet@1.0.0`` published."""
    need_node()
    with serving_npm_registry(tmp_path_factory.mktemp("npm-registry")) as registry:
        yield registry


# -- Python: pypiserver ----------------------------------------------------------------------------------
def _dist(name: str) -> str:
    return name.replace("-", "_")


def write_wheel(dest: Path, name: str, version: str, files: Mapping[str, str]) -> Path:
    """A pure-Python wheel holding ``files`` (path in the wheel → text), written as the spec says, no build."""
    dist_info = f"{_dist(name)}-{version}.dist-info"
    contents = {
        **files,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 "Summary: a team's private package (flower's tests)\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: flower-tests\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n",
    }
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        writer.writerow([path, f"sha256={digest}", len(text.encode())])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{_dist(name)}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in {**contents, f"{dist_info}/RECORD": record.getvalue()}.items():
            z.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), text)
    return wheel


def pip_env(**extra: str) -> dict[str, str]:
    """An environment for pip that reads no config of this machine's (no mirror, no find-links, no index)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def pytest_wheels(spec: str = PYTEST_SPEC, python: str = TEAM_PYTHON) -> Path:
    """``spec`` and its dependencies as wheels for ``python``, downloaded from PyPI once per machine."""
    key = hashlib.sha256(f"{spec}|{python}".encode()).hexdigest()[:12]
    folder = cache_root() / f"pytest-wheels-{key}"
    if (folder / ".complete").is_file():
        return folder
    with cache_lock(folder.name):
        if (folder / ".complete").is_file():
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        _run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", python,
              "--implementation", "py", "-d", str(folder), spec], f"pip download {spec}")  # the machine's pip
        (folder / ".complete").write_text(f"{spec} for python {python}\n")  # config: PyPI or a mirror of it
    return folder


@dataclass(frozen=True)
class PackageIndex:
    """A running pypiserver: every read (listing and download) needs ``user``/``password``."""

    host: str
    port: int
    user: str
    password: str
    package: str
    version: str
    folder: Path

    @property
    def url(self) -> str:
        """The simple index without the login (what a client is refused on)."""
        return f"http://{self.host}:{self.port}/simple/"

    def index_url(self) -> str:
        """The simple index with the login in it: the setup-only secret, as ``--index-url`` or ``PIP_INDEX_URL``."""
        return f"http://{self.user}:{self.password}@{self.host}:{self.port}/simple/"

    def add(self, wheel: Path) -> None:
        """Serve one more distribution file (pypiserver lists the folder on each request)."""
        shutil.copy2(wheel, self.folder / wheel.name)

    def secrets(self) -> tuple[str, ...]:
        """What must never reach an agent phase (its environment, files, /proc, the prepared image)."""
        return (self.password, self.index_url())


def _htpasswd(path: Path, user: str, password: str) -> None:
    import warnings

    with warnings.catch_warnings():  # passlib imports the stdlib's crypt, deprecated in 3.11 (it never uses it here)
        warnings.simplefilter("ignore", DeprecationWarning)
        from passlib.apache import HtpasswdFile

    passwords = HtpasswdFile(str(path), new=True, default_scheme="apr_md5_crypt")
    passwords.set_password(user, password)
    passwords.save()


@contextmanager
def serving_package_index(root: Path, *, package: str = PY_PACKAGE, version: str = PY_VERSION,
                          with_pytest: bool = True) -> Iterator[PackageIndex]:
    """pypiserver on 127.0.0.1 serving ``package==version`` (``add(a, b)``, ``mul(a, b)``) and, with
    ``with_pytest``, pytest's wheels, behind a login; stopped on exit."""
    root.mkdir(parents=True, exist_ok=True)
    folder = root / "packages"
    write_wheel(folder, package, version, {
        f"{_dist(package)}/__init__.py": f'"""{package}: a team\'s private package."""\n\n__version__ = "{version}"\n\n'
                                         "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
    })
    if with_pytest:
        for wheel in pytest_wheels().glob("*.whl"):
            shutil.copy2(wheel, folder / wheel.name)
    user, password = "team", f"setup-only-{secrets.token_hex(16)}"
    _htpasswd(root / "htpasswd", user, password)
    server: _Process | None = None
    for _ in range(3):
        port = free_port()
        server = _spawn([sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port),
                         "-a", "download,list,update", "-P", str(root / "htpasswd"), "--disable-fallback",
                         "--hash-algo", "sha256", "--log-stream", "stderr", str(folder)],
                        root / "pypiserver.log", root)
        try:
            _wait_answering(server, f"http://127.0.0.1:{port}/health", "pypiserver")
            break
        except RegistryDidNotStart:
            server.stop()
            if "Address already in use" not in server.tail():
                raise
            server = None
    if server is None:
        raise RegistryDidNotStart("pypiserver found no free port in three tries")
    try:
        yield PackageIndex("127.0.0.1", port, user, password, package, version, folder)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def package_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndex]:
    """A real Python index (pypiserver) on 127.0.0.1 for the session: ``teamcalc==1.0.0`` and pytest's wheels."""
    with serving_package_index(tmp_path_factory.mktemp("package-index")) as index:
        yield index

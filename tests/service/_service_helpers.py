"""Helpers for the service tests — the service as an operator runs it: ``python -m service`` on 127.0.0.1, a real SQLite registry,
real git repositories, the LocalBackend, and tenants whose credentials file points the run's CLI at
the scripted model — exactly how a real tenant's file points it at the real API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
TOKENS = {"acme": "acme-token-0123456789abcdef", "beta": "beta-token-0123456789abcdef"}
ALL_OPTIONS = ["rounds", "max_asks", "timeout_s", "clarify_only", "goal", "judge_can_run", "instructions"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "team@flower.invalid")
    git(path, "config", "user.name", "team")
    (path / "README.md").write_text("the team's project\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "init")
    return path


class Deployment:
    """Config, tenants file, repositories and credentials of one service installation."""

    def __init__(self, root: Path, *, quota: int = 1, max_running: int = 4, env: dict[str, str] | None = None,
                 backend: str = "local", extra_config: str = "") -> None:
        self.root = root
        self.data = root / "data"
        self.repos = {name: make_repo(root / "repos" / name) for name in TOKENS}
        self.creds = {name: root / "secrets" / f"{name}.env" for name in TOKENS}
        self.set_credentials(env or {"ANTHROPIC_API_KEY": "sk-not-used"})
        self.quota = quota
        self.write_tenants()
        self.config = root / "service.toml"
        # the guard canary has tests of its own (tests/security/test_gateway.py); here it would only add time
        canary = "" if "guard_canary" in extra_config else "guard_canary = false\n"
        self.config.write_text(f'data_dir = "data"\ntenants = "tenants.toml"\nbackend = "{backend}"\n'
                               f"max_running = {max_running}\npoll_s = 0.1\n{canary}{extra_config}")

    def set_credentials(self, env: dict[str, str]) -> None:
        for path in self.creds.values():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
            path.chmod(0o600)

    def write_tenants(self, **override: dict[str, Any]) -> None:
        lines = []
        for name, token in TOKENS.items():
            t = {"name": name, "token": token, "repo": str(self.repos[name]), "credentials": str(self.creds[name]),
                 "quota": self.quota, "allowed_options": ALL_OPTIONS, **override.get(name, {})}
            lines.append("[[tenant]]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in t.items()]
            lines.append("")
        (self.root / "tenants.toml").write_text("\n".join(lines))


class Service:
    """``python -m service`` in a subprocess; its JSON log lines are kept in a file."""

    def __init__(self, deployment: Deployment, name: str = "service", env: dict[str, str] | None = None) -> None:
        self.deployment = deployment
        self.env = env or {}
        self.log_path = deployment.root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 120) -> "Service":  # a loaded machine (four workers) starts it slowly
        env = {**os.environ, "FLOWER_SERVICE_CONFIG": str(self.deployment.config), "PYTHONUNBUFFERED": "1", **self.env}
        self._log = open(self.log_path, "ab")
        self._mark = self.log_path.stat().st_size
        self.proc = subprocess.Popen([sys.executable, "-m", "service", "--port", "0", "--log-format", "json"],
                                     cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines(since_start=True):
                if line.get("event") == "service.listening":
                    self.url = line["url"]
                    return self
            if self.proc.poll() is not None:
                raise AssertionError(f"the service exited: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        self.stop(signal.SIGKILL)  # not left behind: whoever called start() never got a service to stop
        raise AssertionError(f"the service did not start: {self.log_path.read_text()[-3000:]}")

    def lines(self, *, since_start: bool = False) -> list[dict[str, Any]]:
        raw = self.log_path.read_bytes()
        if since_start:
            raw = raw[self._mark:]
        out = []
        for line in raw.decode("utf-8", "replace").splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
        return out

    def client(self, tenant: str | None = "acme", token: str | None = None) -> httpx.Client:
        headers = {}
        if token is not None or tenant is not None:
            headers["Authorization"] = f"Bearer {token if token is not None else TOKENS[tenant]}"  # type: ignore[index]
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        pid = self.proc.pid
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None
        self._log.close()
        if sig != signal.SIGKILL:  # as an operator stops it; a kill -9 leaves the data plane serving
            stop_gateway(self.deployment.data)
            for gateway in started_gateways(pid):  # and one still starting: it has written no lock file yet
                os.kill(gateway, signal.SIGKILL)


def serve(deployment: Deployment, services: list[Service], model: Any, name: str = "service",
          **start: Any) -> Service:
    """The tenants' credentials pointed at ``model``, then the service started (the ``services`` fixture stops it)."""
    deployment.set_credentials(model.env)
    service = Service(deployment, name).start(**start)
    services.append(service)
    return service


def wait_for(fn: Any, timeout: float = 60, every: float = 0.1, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what or fn}: last {last!r}")


def run_status(client: httpx.Client, run_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/runs/{run_id}")
    assert r.status_code == 200, r.text
    return r.json()


def wait_status(client: httpx.Client, run_id: str, statuses: tuple[str, ...], timeout: float = 120) -> dict[str, Any]:
    return wait_for(lambda: (lambda r: r if r["status"] in statuses else None)(run_status(client, run_id)),
                    timeout, what=f"run {run_id} to become {statuses}")


def wait_question(client: httpx.Client, run_id: str, timeout: float = 90) -> dict[str, Any]:
    def one() -> Any:
        r = client.get(f"/v1/runs/{run_id}/questions")
        assert r.status_code == 200, r.text
        qs = r.json()["questions"]
        if not qs:
            assert run_status(client, run_id)["status"] in ("queued", "starting", "running"), run_status(client, run_id)
        return qs[0] if qs else None

    try:
        return wait_for(one, timeout, every=0.1, what=f"a question from run {run_id}")
    except AssertionError as e:  # say where the run stood: queued (never started) reads otherwise like a slow start
        raise AssertionError(f"{e}; the run: {run_status(client, run_id)}") from None


def sse(client: httpx.Client, run_id: str, *, after: int | None = None, last_event_id: str | None = None,
        timeout: float = 120) -> list[dict[str, Any]]:
    """Read the run's event stream to its `end` event: [{"event", "id", "data"}]."""
    params = {"after": after} if after is not None else {}
    headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] = {}
    with client.stream("GET", f"/v1/runs/{run_id}/events", params=params, headers=headers, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                if cur:
                    out.append(cur)
                    if cur.get("event") == "end":
                        return out
                cur = {}
                continue
            if line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "data":
                cur["data"] = json.loads(value)
            elif key in ("event", "id"):
                cur[key] = value
    return out


def end_leftover_runs(root: Path) -> None:
    from sandbox.backends import LocalBackend

    backend = LocalBackend(root=root)
    for handle in backend.live().values():
        backend.stop(handle, timeout=1)
        backend.remove(handle)


def gateway_pid(data: Path) -> int | None:
    """The pid of the gateway process serving ``data`` (what its lock file names), while it is one."""
    try:
        pid = int((data / "gateway.lock").read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError):
        return None
    return pid if b"gateway" in cmdline and b"service" in cmdline else None


def commands() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, command line) of every process this machine shows now."""
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if cmd:
            yield int(entry.name), cmd


def started_gateways(parent: int) -> list[int]:
    """The gateway processes the service ``parent`` started (``--parent``), running or still starting."""
    return [pid for pid, cmd in commands()
            if b"gateway" in cmd and b"--parent" in cmd and str(parent).encode() in cmd]


def stop_gateway(data: Path, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
    """The gateway process a service started beside itself outlives it (its own session): ended here."""
    pid = gateway_pid(data)
    if pid is None:
        return
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while gateway_pid(data) == pid and time.monotonic() < deadline:
        time.sleep(0.05)
    if gateway_pid(data) == pid:
        os.kill(pid, signal.SIGKILL)


def stop_services(started: list[Service]) -> None:
    """Stop what a test started — the services and the gateway each left serving its data dir — and end every run
    sandbox (process or container) it left behind."""
    for s in started:
        s.stop()
    for data in {s.deployment.data for s in started}:
        stop_gateway(data)
    for root in {s.deployment.data / "runs" for s in started}:
        end_leftover_runs(root)
        for run in (root.iterdir() if root.is_dir() else []):
            subprocess.run(f"docker ps -aq --filter label=flower.dir={run} | xargs -r docker rm -f", shell=True,
                           capture_output=True)


SCRAPE_TOKEN = "scrape-token-0123456789abcdef"
SCRAPE = {"Authorization": f"Bearer {SCRAPE_TOKEN}"}
"""The headers of a scrape that sees the per-tenant metrics (a service configured with ``scrape_config``)."""


def scrape_config(root: Path) -> str:
    """The config line of a scrape token (its file written under ``root``): /metrics per tenant with ``SCRAPE``."""
    path = root / "secrets" / "scrape.token"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCRAPE_TOKEN + "\n")
    path.chmod(0o600)
    return f'metrics_token_file = "{path}"\n'


def remove_prepared(*tenants: str) -> None:
    """The tenants' prepared images, and any container still on one (a waiting sandbox), gone."""
    import docker

    client = docker.from_env()
    for tenant in tenants:
        for image in client.images.list(name=f"flower-env/{tenant}"):
            for c in client.containers.list(all=True, filters={"ancestor": image.id}):
                try:
                    c.remove(force=True)
                except docker.errors.APIError as e:  # gone, or the service is removing it right now (409)
                    if e.status_code not in (404, 409):
                        raise

            def removed(image_id: str = image.id) -> bool:
                try:
                    client.images.remove(image_id, force=True)
                except docker.errors.ImageNotFound:
                    return True
                except docker.errors.APIError as e:  # a container of it still being removed
                    if e.status_code != 409:
                        raise
                    return False
                return True

            wait_for(removed, 60, every=0.5, what=f"{image.tags} to be removed")

"""A Docker engine of the test's own, to stop and start while runs are live — never the machine's shared one.

Its socket, exec root and pid file are its own, and it runs in a network namespace of its own (``unshare --net``):
a dockerd with ``--bridge=none`` deletes the host's ``docker0`` when it starts, which took the shared engine's
networking away from every other test; in its own namespace it sees no host interface at all. It touches no
iptables rule either, so starting and stopping it cannot disturb the host or other engines. ``--live-restore`` is on, as service/README.md tells
operators to run theirs: containers keep running while the engine is away. Its data root is kept between test
sessions (``FLOWER_FAULTS_DOCKER_ROOT``, default /var/tmp/flower-faults-dockerd) so the run image is made once:
copied from the shared engine when that one has it (``docker save | docker load``), else built in this one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from _service_helpers import commands

__all__ = ["OwnDockerd"]


class OwnDockerd:
    def __init__(self, state: Path, data_root: Path | None = None, *, live_restore: bool = True) -> None:
        self.live_restore = live_restore
        """Containers outlive the engine's restart (what service/README.md tells operators); without it a restart
        stops them — the loss issue 33 resumes runs after."""
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        self.data_root = data_root or Path(os.environ.get("FLOWER_FAULTS_DOCKER_ROOT", "/var/tmp/flower-faults-dockerd"))
        self.socket = state / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.pidfile = state / "docker.pid"
        self.log = state / "dockerd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> "OwnDockerd":
        self.data_root.mkdir(parents=True, exist_ok=True)
        (self.state / "exec").mkdir(exist_ok=True)
        self.proc = subprocess.Popen(
            ["unshare", "--net", "dockerd", "-H", self.host, "--data-root", str(self.data_root), "--exec-root", str(self.state / "exec"),
             "--pidfile", str(self.pidfile), "--bridge=none", "--iptables=false", "--ip6tables=false",
             "--ip-masq=false", *(["--live-restore"] if self.live_restore else [])],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.answers():
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"our dockerd exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        raise AssertionError(f"our dockerd did not answer: {self.log.read_text()[-2000:]}")

    def answers(self) -> bool:
        return subprocess.run(["docker", "-H", self.host, "info"], capture_output=True, timeout=30).returncode == 0

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to our dockerd only (by its pid), then wait for it to exit."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = None
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL to our engine: its dockerd and its containerd (found by our state folder in their command lines);
        the containers' shims live on, as after a crash of the engine."""
        if self.proc is None:
            return
        ours = [pid for pid, cmd in commands() if Path(os.fsdecode(cmd[0])).name in ("dockerd", "containerd")
                and any(os.fsencode(self.state) in a for a in cmd)]
        for pid in ours:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)
        self.proc = None
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() for pid in ours) and time.monotonic() < deadline:
            time.sleep(0.1)

    def client(self):  # noqa: ANN201 - docker.DockerClient
        import docker

        return docker.DockerClient(base_url=self.host, timeout=120)

    def ensure_run_image(self) -> str:
        """The run image of this tree inside our engine: copied from the shared engine if it has it, else built."""
        import docker

        from sandbox.image import BASE_TAG, ensure_image, image_tag

        ours = self.client()
        try:
            shared = docker.from_env(timeout=30)
            shared.ping()
        except Exception:  # noqa: BLE001 - no shared engine: build in ours
            shared = None
        if shared is not None:
            try:
                tag = image_tag("sandbox", client=shared)
                shared.images.get(tag)
            except docker.errors.ImageNotFound:
                tag = ""
            if tag:
                try:
                    ours.images.get(tag)
                    return tag
                except docker.errors.ImageNotFound:
                    pass
                save = subprocess.Popen(["docker", "save", tag, BASE_TAG], stdout=subprocess.PIPE)
                subprocess.run(["docker", "-H", self.host, "load", "-q"], stdin=save.stdout, check=True,
                               capture_output=True)
                save.wait()
                return tag
        return ensure_image("sandbox", client=ours)

    def containers(self, label: str) -> list[str]:
        out = subprocess.run(["docker", "-H", self.host, "ps", "-q", "--no-trunc", "--filter", f"label={label}"],
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    def remove_containers(self, label: str) -> None:
        ids = subprocess.run(["docker", "-H", self.host, "ps", "-aq", "--filter", f"label={label}"],
                             capture_output=True, text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "-H", self.host, "rm", "-f", *ids], capture_output=True)

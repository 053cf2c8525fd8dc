"""The Docker engine CI starts answers, and testcontainers drives it with no registry."""

from __future__ import annotations

import io
import shutil
import tarfile
import time

import pytest

pytestmark = pytest.mark.docker

TAG = "flower-test/busybox:local"


def _busybox_image(client) -> str:
    """An image made here from the host's static busybox: nothing can be pulled on these machines."""
    if client.images.list(name=TAG):
        return TAG
    busybox = shutil.which("busybox")
    if not busybox:
        pytest.fail("busybox (static) is needed to make the test image: apt-get install busybox-static")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(busybox, arcname="bin/busybox")
        for name in ("sh", "echo", "cat"):
            info = tarfile.TarInfo(f"bin/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    client.api.import_image_from_data(buf.getvalue(), repository=TAG.split(":")[0], tag="local")
    return TAG


def test_a_container_runs_through_testcontainers(docker_engine, monkeypatch):
    import docker
    from testcontainers.core.container import DockerContainer

    monkeypatch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
    image = _busybox_image(docker.from_env())
    with DockerContainer(image).with_command(["sh", "-c", "echo flower-$((6*7)); sleep 30"]) as c:
        for _ in range(50):
            out = c.get_logs()[0].decode()
            if out:
                break
            time.sleep(0.1)
        assert out.strip() == "flower-42"
        container = c.get_wrapped_container()
        container.reload()
        assert container.status == "running"

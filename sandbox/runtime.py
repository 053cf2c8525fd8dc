"""flower's runtime inside a team's image: brought in read-only, started through its own loader.

A team's image needs nothing of flower's. The sandbox image's interpreter, the runner, the Claude Code CLI and git
are copied once per sandbox image into a Docker volume (``ensure_runtime``), mounted read-only at ``RUNTIME`` in
every setup and run container of that team. Our python is started through *our* glibc's loader with *our*
libraries (``argv``): the team's glibc version does not matter to it, and nothing of ours leaks into the team's
processes (no ``LD_LIBRARY_PATH``: the loader's ``--library-path`` holds for that one process). The CLI is a
static-enough binary (glibc ≥ 2.26) that runs on the team's own libc; git, which the runner needs for its
checkpoints, comes as a wrapper in ``BIN`` (last on PATH: the team's own git wins when it has one).

What an image needs, then: Linux on x86-64, a glibc (``/lib64/ld-linux-x86-64.so.2``: Debian, Ubuntu, Fedora,
the official language images — not Alpine's musl) and ``/bin/sh``. ``check_image`` says which is missing.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .errors import EnvironmentRefused, ImageError

__all__ = ["RUNTIME", "BIN", "FILL", "argv", "ensure_runtime", "check_image", "runtime_volume"]

RUNTIME = "/opt/flower-runtime"
BIN = f"{RUNTIME}/flower-bin"
_LIBS = f"{RUNTIME}/usr/lib/x86_64-linux-gnu"
_LOADER = f"{_LIBS}/ld-linux-x86-64.so.2"
# -I: nothing of the team's (PYTHONPATH, the cwd) is imported; the venv's site-packages are ours alone.
_BOOT = ("import glob, runpy, site, sys; "
         f"site.addsitedir(glob.glob({RUNTIME!r} + '/opt/flower/lib/python3*/site-packages')[0]); "
         "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
_GIT = f"""#!/bin/sh
# flower's git, for a team image without one (the runner checkpoints with it)
GIT_EXEC_PATH={RUNTIME}/usr/lib/git-core GIT_TEMPLATE_DIR={RUNTIME}/usr/share/git-core/templates \\
  exec {_LOADER} --library-path {_LIBS} {RUNTIME}/usr/bin/git "$@"
"""
# Copied out of the sandbox image: the interpreter and its libraries, the venv (runner, SDK, CLI), git — with their
# times (``-a``): a .pyc whose source's time changed is compiled again at every import (the volume is read-only).
# Run by root in the sandbox image into an empty ``RUNTIME`` (root for ``cp -a``'s ownership: CAP_CHOWN is all it
# needs): here into the Docker volume, and by the Kubernetes backend's initContainer into the pod's emptyDir.
FILL = f"""set -e
cp -a /usr /etc {RUNTIME}/
mkdir -p {RUNTIME}/opt
cp -a /opt/flower {RUNTIME}/opt/
mkdir -p {BIN}
cat > {BIN}/git <<'EOF'
{_GIT}EOF
chmod 0755 {BIN}/git
touch {RUNTIME}/.complete
"""


def argv(module: str, *args: str) -> list[str]:
    """The command that runs ``python -m module args`` from the runtime, in any glibc image."""
    return [_LOADER, "--library-path", _LIBS, f"{RUNTIME}/usr/bin/python3", "-I", "-c",
            _BOOT.format(module=module), *args]


def runtime_volume(sandbox_image_id: str) -> str:
    return "flower-runtime-" + hashlib.sha256(sandbox_image_id.encode()).hexdigest()[:16]


_filled: set[str] = set()  # volumes seen complete by this process: a start does not probe them again
_usable: dict[str, dict[str, Any]] = {}  # image id → its config, once it was seen fit for the runtime


def ensure_runtime(client: Any, sandbox_image: str) -> str:
    """The volume holding the runtime of ``sandbox_image``, filled once (a half-filled one is filled again); the
    volumes of older sandbox images go once no container mounts them (each is the size of the image)."""
    import docker

    image = client.images.get(sandbox_image)
    name = runtime_volume(image.id)
    if name in _filled and any(v.name == name for v in client.volumes.list(filters={"name": name})):
        return name
    try:
        client.volumes.get(name)
        probe = client.containers.run(image.id, ["sh", "-c", f"test -e {RUNTIME}/.complete"], entrypoint=[],
                                      user="0:0", network_mode="none", remove=True, detach=False,
                                      volumes={name: {"bind": RUNTIME, "mode": "ro"}})
        del probe
        _filled.add(name)
        return name
    except docker.errors.NotFound:
        client.volumes.create(name, labels={"org.flower.runtime": image.id})
    except docker.errors.ContainerError:
        pass  # there, but not filled to the end: fill it again
    try:
        client.containers.run(image.id, ["sh", "-c", f"rm -rf {RUNTIME}/* {RUNTIME}/.complete; {FILL}"],
                              entrypoint=[], user="0:0", network_mode="none", remove=True,
                              volumes={name: {"bind": RUNTIME, "mode": "rw"}})
    except docker.errors.ContainerError as e:
        raw = e.stderr or b""
        tail = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).strip()[-500:]
        raise ImageError(f"flower's runtime could not be copied out of {sandbox_image} into the volume {name}: "
                         f"{tail or e}") from None
    _filled.add(name)
    for old in client.volumes.list(filters={"label": "org.flower.runtime"}):
        if old.name != name:  # another sandbox image's: refused while a container still mounts it
            try:
                old.remove()
            except docker.errors.APIError:
                pass
    return name


def check_image(client: Any, image_id: str, name: str) -> dict[str, Any]:
    """The image's config if a runtime can live in it; else EnvironmentRefused saying what it lacks."""
    import docker

    attrs = client.images.get(image_id).attrs
    if attrs["Id"] in _usable:
        return _usable[attrs["Id"]]
    arch, os_ = attrs.get("Architecture"), attrs.get("Os")
    if os_ != "linux" or arch != "amd64":
        raise EnvironmentRefused(f"the image {name} is for {os_}/{arch}: flower's runtime needs linux/amd64")
    probe = client.containers.create(image_id, ["/bin/sh", "-c", "test -e /lib64/ld-linux-x86-64.so.2"],
                                     entrypoint=[], user="0:0", network_mode="none")
    try:  # created, then started: a start that fails leaves the container, which goes in any case
        probe.start()
        code = probe.wait()["StatusCode"]
    except docker.errors.APIError as e:
        if "no such file" in str(e).lower() or "not found" in str(e).lower():
            raise EnvironmentRefused(f"the image {name} has no /bin/sh: setup commands and the agent's shell need "
                                     "one") from None
        raise
    finally:
        probe.remove(force=True)
    if code != 0:
        raise EnvironmentRefused(f"the image {name} has no glibc (/lib64/ld-linux-x86-64.so.2; e.g. Alpine's musl): "
                                 "the Claude Code CLI cannot run in it — use a Debian-, Ubuntu- or Fedora-based "
                                 "image")
    _usable[attrs["Id"]] = config = dict(attrs.get("Config") or {})
    return config

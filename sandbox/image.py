"""Build the run image with no registry: a local Debian base, a wheelhouse made on the host, ``docker build``.

1. **Base** (``build_base``): ``debootstrap --variant=minbase --include=python3,python3-venv,git,ca-certificates
   bookworm <dir>``, then the tree is imported as an image (``docker import``). Cached by tag
   (``flower/base:bookworm``): built once per machine.
2. **Wheelhouse** (``build_wheelhouse``): ``pip wheel`` of this project and of every dependency (the
   ``service`` extra included) into ``build/wheelhouse/`` — inside a build pip cannot reach an index, so the
   Dockerfile installs with ``--no-index`` from there (the air-gapped way, on purpose).
3. **Image** (``build_image``): the repository's top-level ``Dockerfile``, target ``sandbox`` (or ``service``),
   ``--build-arg BASE=<base tag>``. Tagged ``flower/<target>:<digest>``, the digest covering the Dockerfile,
   pyproject.toml, flower/, sandbox/, plugin/ (and service/ for the service image) and the base image: an
   unchanged tree is never rebuilt (``ensure_image`` returns at once); older builds of the tag are removed.

Measured here: base 66 s (debootstrap ~60 s), 268 MB; wheelhouse 14 s cold / 8 s warm (64 wheels, 201 MB);
sandbox image ~50 s on top, 737 MB (400 MB of it is the Claude Code binary inside claude-agent-sdk).

Nothing is pushed or pulled. ``python -m sandbox.image [--target T] [--force]`` builds and prints timings.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flower import __version__
from flower.core.files import locked

from .errors import ImageError

__all__ = ["BASE_TAG", "PROJECT", "build_base", "build_wheelhouse", "build_image", "ensure_image", "image_tag",
           "source_digest", "ImageError"]

BASE_TAG = "flower/base:bookworm"
PROJECT = Path(__file__).resolve().parents[1]
MIRROR = os.environ.get("FLOWER_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ("python3", "python3-venv", "git", "ca-certificates")
_HASHED = ("Dockerfile", ".dockerignore", "pyproject.toml")
# The sandbox image never runs service/ (it is in the wheel all the same): a service-only change does not rebuild it.
_HASHED_DIRS = {"sandbox": ("flower", "sandbox", "plugin"), "service": ("flower", "sandbox", "service", "plugin")}

Log = Callable[[str], None]


def _say(text: str) -> None:
    print(f"[image] {text}", file=sys.stderr, flush=True)


def _client(client: Any = None) -> Any:
    if client is not None:
        return client
    import docker

    return docker.from_env()


def _exists(client: Any, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def _one_maker() -> contextlib.AbstractContextManager[None]:
    """One process of this user makes an image at a time: two services (two replicas, a test run's workers)
    starting together would both debootstrap, and both write the wheelhouse under one folder. Whoever waited
    finds the image made (the callers check again once they hold this). The lock is in the user's own cache, not
    a shared /tmp where another user could create it first and hold it."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flower"
    return locked(cache / "image")


def _run(cmd: list[str], what: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        tail = "\n".join((out.stderr or out.stdout).strip().splitlines()[-15:])
        raise ImageError(f"{what} failed (exit {out.returncode}):\n{tail}")
    return out


# -- 1. base ---------------------------------------------------------------------------------------
def build_base(tag: str = BASE_TAG, *, suite: str = "bookworm", mirror: str = MIRROR, force: bool = False,
               client: Any = None, log: Log = _say) -> str:
    """The local base image (debootstrap minbase + python3, venv, git, CA certificates); cached by ``tag``."""
    client = _client(client)
    if not force and _exists(client, tag):
        return tag
    with _one_maker():
        if not force and _exists(client, tag):
            return tag
        return _debootstrap(tag, suite=suite, mirror=mirror, client=client, log=log)


def _debootstrap(tag: str, *, suite: str, mirror: str, client: Any, log: Log) -> str:
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed: apt-get install -y debootstrap (or pass a base image "
                         "that exists, e.g. BASE=python:3.11-slim-bookworm where images can be pulled)")
    if os.geteuid() != 0:
        raise ImageError("debootstrap needs root: build the base once as root (python -m sandbox.image --base-only)")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flower-base-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "root"
        log(f"debootstrap {suite} ({', '.join(PACKAGES)}) from {mirror} …")
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(root), mirror],
             "debootstrap")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        log(f"debootstrap done in {time.monotonic() - t0:.0f}s; importing as {tag} …")
        repo, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        try:
            client.api.import_image(src=tar.stdout, repository=repo, tag=version, stream_src=True,
                                    changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                             "ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]'])
        finally:
            tar.stdout.close()  # type: ignore[union-attr]
            tar.wait()
    if not _exists(client, tag):
        raise ImageError(f"docker import did not produce {tag}")
    log(f"base {tag} built in {time.monotonic() - t0:.0f}s")
    return tag


# -- 2. wheelhouse -----------------------------------------------------------------------------------
def _requirements(project: Path, extras: tuple[str, ...]) -> list[str]:
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(meta.get("dependencies", []))
    for extra in extras:
        reqs += [r for r in meta.get("optional-dependencies", {}).get(extra, []) if not r.startswith(meta["name"])]
    return reqs


def build_wheelhouse(dest: str | Path | None = None, *, project: str | Path = PROJECT,
                     extras: tuple[str, ...] = ("service",), log: Log = _say) -> Path:
    """``dest`` (default ``<project>/build/wheelhouse``) holding this project's wheel and every dependency's.

    Dependencies already there are reused without asking any index; only what is missing is fetched.
    """
    project = Path(project).resolve()
    dest = Path(dest) if dest else project / "build" / "wheelhouse"
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for old in [*dest.glob("flower-*.whl"), *dest.glob("flower_agents-*.whl")]:  # the old name and the new
        old.unlink()
    for stale in [project / "build" / "lib", *(project / "build").glob("bdist.*")]:  # setuptools would reuse them,
        shutil.rmtree(stale, ignore_errors=True)  # and a module deleted from the tree would live on in the wheel
    pip = [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "-w", str(dest)]
    _run([*pip, "--no-deps", str(project)], "pip wheel (this project)")
    reqs = _requirements(project, extras)
    try:
        _run([*pip, "--no-index", "--find-links", str(dest), *reqs], "pip wheel (dependencies, offline)")
    except ImageError:
        log("fetching the dependencies' wheels …")
        _run([*pip, "--find-links", str(dest), *reqs], "pip wheel (dependencies)")
    log(f"wheelhouse {dest} ready in {time.monotonic() - t0:.0f}s "
        f"({len(list(dest.glob('*.whl')))} wheels, {_size(dest) / 1e6:.0f} MB)")
    return dest


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- 3. image ---------------------------------------------------------------------------------------
def source_digest(project: str | Path = PROJECT, target: str = "service") -> str:
    """sha256 over what goes into ``target``'s image: the Dockerfile, pyproject.toml and the source folders."""
    project = Path(project).resolve()
    h = hashlib.sha256()
    files = [project / f for f in _HASHED if (project / f).is_file()]
    for d in _HASHED_DIRS.get(target, _HASHED_DIRS["service"]):
        for dirpath, dirnames, filenames in os.walk(project / d):
            dirnames[:] = sorted(n for n in dirnames if n != "__pycache__" and not n.endswith(".egg-info"))
            # what the wheel carries of a package is its .py files; the plugin is copied whole
            files += [Path(dirpath) / f for f in filenames if f.endswith(".py") or (d == "plugin" and not
                                                                                  f.endswith((".pyc", ".pyo")))]
    for f in sorted(files):
        h.update(str(f.relative_to(project)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def image_tag(target: str = "sandbox", *, base: str = BASE_TAG, project: str | Path = PROJECT,
              client: Any = None) -> str:
    """``flower/<target>:<12 hex>`` for this tree on this base (the base's image id is part of the digest)."""
    base_id = _client(client).images.get(base).id
    digest = hashlib.sha256(f"{source_digest(project, target)}|{target}|{base_id}".encode()).hexdigest()
    return f"flower/{target}:{digest[:12]}"


def build_image(target: str = "sandbox", *, base: str = BASE_TAG, tag: str | None = None,
                project: str | Path = PROJECT, wheelhouse: str | Path | None = None, force: bool = False,
                client: Any = None, log: Log = _say) -> str:
    """``docker build --target <target> --build-arg BASE=<base>`` of the project's Dockerfile; returns the tag."""
    client = _client(client)
    project = Path(project).resolve()
    if not (project / "Dockerfile").is_file():
        raise ImageError(f"{project} has no Dockerfile: build from a checkout of the flower repository")
    tag = tag or image_tag(target, base=base, project=project, client=client)
    if not force and _exists(client, tag):
        return tag
    with _one_maker():
        if not force and _exists(client, tag):
            return tag
        return _build(client, target, base, tag, project, wheelhouse, log)


def _build(client: Any, target: str, base: str, tag: str, project: Path, wheelhouse: str | Path | None,
           log: Log) -> str:
    t0 = time.monotonic()
    wheels = Path(wheelhouse) if wheelhouse else build_wheelhouse(project=project, log=log)
    rel = os.path.relpath(wheels, project)
    if rel.startswith(".."):
        raise ImageError(f"the wheelhouse {wheels} must be inside {project} (the build context)")
    log(f"docker build --target {target} --build-arg BASE={base} -t {tag} …")
    lines: list[str] = []
    for chunk in client.api.build(path=str(project), dockerfile="Dockerfile", target=target, tag=tag, rm=True,
                                  forcerm=True, pull=False, decode=True,
                                  buildargs={"BASE": base, "WHEELHOUSE": rel.replace(os.sep, "/"),
                                             "VERSION": __version__}):
        if "stream" in chunk:
            lines += chunk["stream"].splitlines()
        if "error" in chunk:
            raise ImageError(f"docker build failed: {chunk['error'].strip()}\n" + "\n".join(lines[-15:]))
    size = client.images.get(tag).attrs.get("Size", 0)
    log(f"image {tag} built in {time.monotonic() - t0:.0f}s, {size / 1e6:.0f} MB")
    _tidy(client, tag)
    return tag


def _tidy(client: Any, keep: str) -> None:
    """Drop earlier builds of the same image (unless a container uses them) and our dangling build stages."""
    import docker

    repo = keep.rsplit(":", 1)[0]
    for image in client.images.list(name=repo):
        for t in image.tags:
            if t != keep and t.rsplit(":", 1)[0] == repo:
                try:
                    client.images.remove(t)
                except docker.errors.APIError:
                    pass  # in use by a container: kept
    try:
        client.images.prune(filters={"dangling": True, "label": "org.flower.build"})
    except docker.errors.APIError:
        pass


def ensure_image(target: str = "sandbox", *, base: str = BASE_TAG, project: str | Path = PROJECT,
                 client: Any = None, log: Log = _say) -> str:
    """The image for this tree, built only if it is not here yet (the base too, when it is the local one)."""
    client = _client(client)
    if base == BASE_TAG or not _exists(client, base):
        build_base(base, client=client, log=log)
    return build_image(target, base=base, project=project, client=client, log=log)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m sandbox.image", description="Build flower's run image locally.")
    p.add_argument("--target", default="sandbox", choices=["sandbox", "service"])
    p.add_argument("--base", default=BASE_TAG, help=f"base image tag (default {BASE_TAG}, made with debootstrap)")
    p.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    p.add_argument("--base-only", action="store_true", help="only make the base image")
    args = p.parse_args(argv)
    client = _client()
    t0 = time.monotonic()
    try:
        build_base(args.base, force=args.force and args.base_only, client=client)
        if args.base_only:
            return 0
        tag = build_image(args.target, base=args.base, force=args.force, client=client)
    except ImageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(tag)
    _say(f"total {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

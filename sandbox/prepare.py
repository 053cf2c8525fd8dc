"""The team's environment, made ready once and kept: its image, its setup done, flower's runtime beside it.

``prepare(recipe, tree, ...)`` → ``Prepared`` (what a run's spec carries):

1. **Base**: the recipe's image (the tenant's, or the repository's devcontainer ``image``) — it must be on this
   machine, nothing is pulled — or the devcontainer's Dockerfile built from the repository at the run's base, with
   no network (installs belong in setup, which goes through the allow-list). ``runtime.check_image`` refuses an
   image flower's runtime cannot live in.
2. **Key**: the base image's id, the setup commands, the environment, the user and the digests of what setup reads
   (the devcontainer file, the Dockerfile, the lockfiles at the run's base) — ``Recipe.key``. A prepared image
   of that key (``flower-env/<tenant>:<key>``) is reused as it is: no setup.
3. **Setup** (only when the key is new): a container of the base image with the repository at ``WORKSPACE``,
   flower's runtime mounted read-only, no network but the egress socket (the tenant's allow-list) and the
   setup-only secrets in a read-only file beside the plan — never in the container's environment or its layers.
   ``sandbox.setup`` runs the commands as root (nothing of the host is writable in there: it may install into the
   image) and moves what they made in the checkout (``node_modules``…) to ``SEED``, which the runner copies into
   each run's own checkout. A failing command fails the prepare with its tail (``SetupFailed``), and nothing is
   kept: the next run prepares again.
4. **Scan, then commit**: every file setup added or changed is read back and searched for each secret's value;
   one found refuses the prepare and names the file (the prepared image would carry it to every run). Then the
   container is committed with the base image's own config and flower's labels.

``prune(cap_bytes)`` removes the least recently used prepared images past a size cap. ``push`` puts one in a
registry, for a backend whose runs do not start on this engine (Kubernetes).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec

from .devcontainer import IMAGE_LABEL, image_metadata
from .environment import WORKSPACE, Recipe, with_image_metadata
from .errors import EnvironmentRefused, SetupFailed
from .runtime import BIN, RUNTIME, argv, check_image, ensure_runtime
from .setup import SEED, SEED_MARK
from .spec import Prepared

__all__ = ["prepare", "prune", "push", "stop_setups", "EgressOpener", "PLAN_DIR", "PREPARED_REPO"]

PLAN_DIR = "/run/flower-setup"
PREPARED_REPO = "flower-env"
OWNER = f"{socket.gethostname()}:{os.getpid()}"
"""This process's setups carry it (``org.flower.setup.owner``): ``stop_setups`` ends them, no other's."""
_TAIL = 60
_SCAN_CHUNK = 1 << 20  # files setup wrote are searched a chunk at a time: any size, bounded memory
# Setup runs as root in a container with nothing of the host writable: enough to install into the image, no more.
_SETUP_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"]

EgressOpener = Callable[[str, Path], AbstractContextManager[object]]
"""``(key, folder)`` → a context in which the tenant's egress socket is open in ``folder``."""
Log = Callable[[str], None]


_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def _lock(key: str) -> threading.Lock:
    """Two runs of one key at once prepare it once: the second waits and finds the image."""
    with _locks_lock:
        return _locks.setdefault(key, threading.Lock())


def prepare(recipe: Recipe, tree: Path, *, tenant: str, sandbox_image: str, client: Any = None,
            secrets: Mapping[str, str] | None = None, egress: EgressOpener | None = None,
            timeout_s: float = 1800.0, network_mode: str = "none", log: Log | None = None,
            fill: Callable[[], None] | None = None) -> Prepared:
    """The team's environment for a checkout whose files at the run's base are in ``tree`` (see the module doc).

    Blocking (a first setup may take minutes). ``secrets``: setup-only values (a private registry's token);
    ``egress``: opens the tenant's allow-listed way out for the setup container, else setup has no network (but
    ``network_mode``'s, for a tenant whose egress is open). ``fill``: ``tree`` holds only the recipe's inputs
    until it is called — only a build or a setup reads the rest, so a kept environment never waits for a large
    repository's export."""
    import docker

    client = client or docker.from_env()
    say = log or (lambda _text: None)
    filled = threading.Event()

    def whole() -> None:
        if fill is not None and not filled.is_set():
            fill()
            filled.set()

    runtime = ensure_runtime(client, sandbox_image)
    base_id, name = _base(client, recipe, tree, tenant, say, whole)
    config = check_image(client, base_id, name)
    user = _user(client, base_id, name, recipe.user)
    label = (config.get("Labels") or {}).get(IMAGE_LABEL)
    if label:
        merged = with_image_metadata(recipe, image_metadata(label, image=name), f"{WORKSPACE}/{tree.name}")
        if user is None and merged.user is not None:
            user = _metadata_user(client, base_id, name, merged.user, say)
        recipe = merged
    env = _env(config, recipe.env)
    if not recipe.stages:
        return Prepared(image=base_id, key=recipe.key(base_id), runtime=runtime, env=env, user=user)
    key = recipe.key(base_id)
    tag = f"{PREPARED_REPO}/{_safe(tenant)}:{key}"
    with _lock(key):
        try:
            image = client.images.get(tag)
            say(f"prepared environment {tag} is there: no setup")
            _touch(image)
            return Prepared(image=tag, key=key, runtime=runtime, env=env, user=user,
                            seed=image.labels.get("org.flower.env.seed") == "1")
        except docker.errors.ImageNotFound:
            pass
        say(f"preparing {tag} from {name}: {sum(len(s) for s in recipe.stages)} setup command(s)")
        started = time.monotonic()
        whole()
        seed = _setup(client, recipe, tree, base_id, config, runtime, tag, key, dict(secrets or {}), egress,
                      timeout_s, network_mode, say)
        say(f"prepared {tag} in {time.monotonic() - started:.0f}s")
    return Prepared(image=tag, key=key, runtime=runtime, env=env, user=user, seed=seed)


def _base(client: Any, recipe: Recipe, tree: Path, tenant: str, say: Log,
          whole: Callable[[], None]) -> tuple[str, str]:
    """The base image's id and a name for it in sentences."""
    import docker

    if recipe.build is not None:
        b = recipe.build
        digest = hashlib.sha256(msgspec.json.encode(b) + _digest(recipe)).hexdigest()[:24]
        tag = f"{PREPARED_REPO}-base/{_safe(tenant)}:{digest}"
        try:
            return client.images.get(tag).id, f"{b.dockerfile} (built)"
        except docker.errors.ImageNotFound:
            pass
        context = (tree / b.context).resolve()
        dockerfile = (tree / b.dockerfile).resolve()
        if not context.is_relative_to(tree.resolve()) or not dockerfile.is_relative_to(tree.resolve()):
            raise EnvironmentRefused(f"the devcontainer's build names {b.dockerfile} / {b.context} outside the "
                                     "repository")
        whole()
        say(f"building {b.dockerfile}")
        try:
            image, _ = client.images.build(path=str(context), dockerfile=str(dockerfile), buildargs=dict(b.args),
                                           target=b.target, tag=tag, rm=True, forcerm=True, network_mode="none",
                                           labels={"org.flower.env.base": tenant,  # pruned as prepared ones are
                                                   "org.flower.env.key": f"build:{digest}"})
        except docker.errors.BuildError as e:
            lines = [str(x.get("stream") or x.get("error") or "").rstrip() for x in e.build_log]
            tail = "\n".join(line for line in lines if line)[-4000:]
            raise SetupFailed(f"the devcontainer's Dockerfile {b.dockerfile} did not build (its RUN lines have no "
                              f"network: installs go in setup commands): {e.msg}", tail=tail) from None
        return image.id, f"{b.dockerfile} (built)"
    if not recipe.image:
        raise EnvironmentRefused("the environment names no image: set the tenant's `image` or the devcontainer's "
                                 "`image`/`build`")
    try:
        return client.images.get(recipe.image).id, recipe.image
    except docker.errors.ImageNotFound:
        raise EnvironmentRefused(f"the base image {recipe.image} is not on this machine: flower pulls nothing — "
                                 f"`docker pull {recipe.image}` (or `docker load`) it on the engine first") from None


def _digest(recipe: Recipe) -> bytes:
    return msgspec.json.encode(dict(sorted(recipe.inputs.items())))


def _user(client: Any, image_id: str, name: str, user: str | None) -> str | None:
    """``uid:gid`` of the devcontainer's user in the image (``name``, ``uid``, ``name:group``, ``uid:gid``…, as the
    specification allows, names looked up in the image's /etc/passwd and /etc/group); root refused (a run never
    runs as root)."""
    if user is None:
        return None
    name_part, _, group_part = user.partition(":")
    files: dict[str, list[list[str]]] = {}

    def entry(path: str, key: str) -> list[str] | None:
        if path not in files:
            text = _read_file(client, image_id, path).decode("utf-8", "replace")
            files[path] = [line.split(":") for line in text.splitlines()]
        found = [f for f in files[path] if f[0] == key and len(f) >= 3]
        return found[0] if found else None

    uid, gid = name_part, group_part
    if not name_part.isdigit():
        found = entry("/etc/passwd", name_part)
        if found is None or len(found) < 4:
            raise EnvironmentRefused(f"the devcontainer's remoteUser {user!r} is not a user of the image {name}")
        uid, gid = found[2], group_part or found[3]
    gid = gid or name_part
    if not gid.isdigit():
        group = entry("/etc/group", gid)
        if group is None:
            raise EnvironmentRefused(f"the devcontainer's remoteUser {user!r} names the group {gid!r}, which is not "
                                     f"a group of the image {name}")
        gid = group[2]
    if not (uid.isdigit() and gid.isdigit()):
        raise EnvironmentRefused(f"the devcontainer's remoteUser {user!r} has no numeric uid:gid in the image {name}")
    if int(uid) == 0:  # "00" is root too
        raise EnvironmentRefused(f"the devcontainer's remoteUser {user!r} is root: a run never runs as root "
                                 "(setup does, in its own container); name an unprivileged user")
    return f"{int(uid)}:{int(gid)}"


def _metadata_user(client: Any, image_id: str, name: str, user: str, say: Log) -> str | None:
    """The user the image's metadata names, unless it is root: the repository did not ask for it, so the run
    keeps flower's own user rather than being refused."""
    try:
        return _user(client, image_id, name, user)
    except EnvironmentRefused as e:
        say(f"the image's devcontainer.metadata user is not used: {e}")
        return None


def _env(config: Mapping[str, Any], extra: Mapping[str, str]) -> dict[str, str]:
    """The team's environment variables on top of the image's, and PATH ending with flower's ``BIN``."""
    image_env = dict(item.split("=", 1) for item in (config.get("Env") or []) if "=" in item)
    path = extra.get("PATH") or image_env.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return {**extra, "PATH": f"{path}:{BIN}"}


def _read_file(client: Any, image_id: str, path: str) -> bytes:
    """The first MiB of a file of the image (the team's: streamed, never read whole); empty when there is none."""
    import docker

    container = client.containers.create(image_id, ["/bin/true"], entrypoint=[], network_mode="none")
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=_StreamReader(stream), mode="r|") as tar:
            member = tar.next()
            f = tar.extractfile(member) if member is not None and member.isfile() else None
            return f.read(1 << 20) if f is not None else b""
    except (docker.errors.NotFound, tarfile.TarError):
        return b""
    finally:
        container.remove(force=True)


def _setup(client: Any, recipe: Recipe, tree: Path, base_id: str, config: Mapping[str, Any], runtime: str,
           tag: str, key: str, secrets: dict[str, str], egress: EgressOpener | None, timeout_s: float,
           network_mode: str, say: Log) -> bool:
    """Run the setup in a container of the base image, scan what it wrote, commit it as ``tag``; whether it left a
    seed for the checkout."""
    from docker.types import Mount

    outer = Path(tempfile.mkdtemp(prefix="flower-setup-"))  # 0700: only the service sees into it
    try:
        plan_dir = outer / "plan"
        plan_dir.mkdir(mode=0o755)
        workspace = f"{WORKSPACE}/{tree.name}"
        plan = {"workspace": workspace, "seed": SEED, "stages": recipe.stages, "env": recipe.env}
        (plan_dir / "plan.json").write_text(json.dumps(plan))
        (plan_dir / "secrets.json").write_text(json.dumps(secrets))
        os.chmod(plan_dir / "plan.json", 0o644)
        os.chmod(plan_dir / "secrets.json", 0o644)  # readable by the setup's root, which holds no DAC_READ_SEARCH
        egress_dir = outer / "egress"
        egress_dir.mkdir(mode=0o755)
        mounts = [Mount(RUNTIME, runtime, type="volume", read_only=True),
                  Mount(PLAN_DIR, str(plan_dir), type="bind", read_only=True),
                  Mount(str(egress_dir), str(egress_dir), type="bind", read_only=True)]
        _reap_orphans(client)
        opened = egress(f"setup-{key[:12]}", egress_dir) if egress is not None else nullcontext()
        with opened:
            container = client.containers.create(
                base_id, argv("sandbox.setup", f"{PLAN_DIR}/plan.json", str(egress_dir)), entrypoint=[],
                user="0:0", network_mode=network_mode, mounts=mounts, working_dir="/", cap_drop=["ALL"],
                cap_add=_SETUP_CAPS, security_opt=["no-new-privileges"], pids_limit=1024, mem_limit="4g",
                memswap_limit="4g", tmpfs={"/tmp": "rw,nosuid,nodev,size=1g,mode=1777"},
                environment={"LANG": "C.UTF-8", "HOME": "/root", "PATH": _env(config, recipe.env)["PATH"]},
                labels={"org.flower.setup": key, "org.flower.setup.owner": OWNER})
            try:
                container.put_archive("/", _tar_of(tree, workspace.lstrip("/")))
                container.start()
                code = _wait(container, timeout_s, lambda line: say(_redact(line, secrets)))
                tail = _redact(_tail(container.logs().decode("utf-8", "replace")), secrets)
                if code != 0:
                    what = "did not finish" if code is None else f"exited {code}"
                    raise SetupFailed(f"setup {what}; the run did not start (the next run prepares again)",
                                      tail=tail, exit_code=code)
                say(tail)
                _scan(container, secrets, [RUNTIME, PLAN_DIR, str(egress_dir)])
                image_labels = dict((config.get("Labels") or {}))
                seeded = _seeded(container)
                conf = {"Env": list(config.get("Env") or []), "Cmd": config.get("Cmd"),
                        "Entrypoint": config.get("Entrypoint"), "User": config.get("User") or "",
                        "WorkingDir": config.get("WorkingDir") or "",
                        "Labels": {**image_labels, "org.flower.env.key": key, "org.flower.env.base": base_id,
                                   "org.flower.env.seed": "1" if seeded else "0"}}
                repo, _, tag_name = tag.rpartition(":")
                container.commit(repository=repo, tag=tag_name, conf=conf)
                return seeded
            finally:
                container.remove(force=True)
    finally:
        shutil.rmtree(outer, ignore_errors=True)


def stop_setups(client: Any = None) -> int:
    """End this process's setups now (the service stops: a prepare must not hold it for minutes); their runs are
    put back in line by the next start's recovery. How many were ended."""
    import docker

    client = client or docker.from_env()
    ended = 0
    for c in client.containers.list(all=True, filters={"label": f"org.flower.setup.owner={OWNER}"}):
        try:  # removed, not only killed: the prepare that would have removed it ends with this process
            c.remove(force=True)
            ended += 1
        except docker.errors.APIError:
            pass
    return ended


def push(prepared: Prepared, *, tenant: str, registry: str, client: Any = None,
         auth_file: str | Path | None = None) -> str:
    """Put a prepared environment where a cluster pulls it (the Kubernetes backend): tagged
    ``<registry>/flower-env/<tenant>:<key>``, pushed, untagged again (``prune`` keeps seeing one image per key);
    the pushed reference by digest (``…@sha256:…``), so a pod runs exactly what was prepared.

    ``auth_file``: a Docker ``config.json`` (what a ``kubernetes.io/dockerconfigjson`` Secret holds) whose entry for
    the registry's host logs the push in; without one, the engine's own login if it has one. EnvironmentRefused
    says why the registry refused; BackendUnavailable when it cannot be reached (the run waits its turn again)."""
    import docker

    from .errors import BackendUnavailable

    client = client or docker.from_env()
    repository = f"{registry.rstrip('/')}/{PREPARED_REPO}/{_safe(tenant)}"
    ref = f"{repository}:{prepared.key}"
    auth = _login(Path(auth_file), registry) if auth_file else None
    with _lock("push " + ref):
        try:
            client.images.get(prepared.image).tag(repository, prepared.key)
        except docker.errors.ImageNotFound:
            raise EnvironmentRefused(f"the prepared environment {prepared.image} is no longer on the Docker engine "
                                     "(pruned?): the next run prepares it again") from None
        digest, error = "", ""
        try:
            for line in client.images.push(repository, tag=prepared.key, stream=True, decode=True, auth_config=auth):
                error = str(line.get("error") or "") or error
                digest = str((line.get("aux") or {}).get("Digest") or "") or digest
        finally:
            client.images.remove(ref)  # only the tag: the image stays under its flower-env tag
    if error and "dial tcp" in error:  # Go's word for a connection that failed: the registry is away, not wrong
        raise BackendUnavailable(f"the registry {registry} does not answer ({error}): runs wait for it")
    if error or not digest:
        raise EnvironmentRefused(f"the registry {registry} refused the prepared environment {ref}: "
                                 f"{error or 'no digest came back'} — check `environment_registry` and the push "
                                 "credentials (the chart's environment.pushSecret)")
    return f"{repository}@{digest}"


def _login(path: Path, registry: str) -> dict[str, str] | None:
    """The registry host's user and password from a Docker config.json (``auths``), None when it has no entry."""
    host = registry.split("/", 1)[0]
    try:
        auths = json.loads(path.read_text(encoding="utf-8")).get("auths")
        entry = auths.get(host) or auths.get(f"https://{host}") or auths.get(f"http://{host}")
        if entry is None:
            return None
        if entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode("utf-8").partition(":")
        else:
            user, password = entry["username"], entry["password"]
    except OSError as e:
        raise EnvironmentRefused(f"the registry credentials {path} cannot be read: {e.strerror or e}") from None
    except (ValueError, AttributeError, KeyError, TypeError):
        raise EnvironmentRefused(f"the registry credentials {path} are not a Docker config.json with "
                                 f'{{"auths": {{"{host}": {{"auth": "<base64 of user:password>"}}}}}}') from None
    return {"username": user, "password": password}


def _reap_orphans(client: Any) -> None:
    """Setups a process of this machine left when it was killed (no ``stop_setups`` ran): they would run on, a
    `sleep` or a hung install, for nobody."""
    import docker

    host = socket.gethostname()
    for c in client.containers.list(all=True, filters={"label": "org.flower.setup.owner"}):
        owner_host, _, pid = str(c.labels.get("org.flower.setup.owner", "")).rpartition(":")
        if owner_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            c.remove(force=True)
        except docker.errors.APIError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait(container: Any, timeout_s: float, progress: Callable[[str], None]) -> int | None:
    """The setup's exit code, or None once it ran ``timeout_s`` (killed); every few seconds meanwhile its last
    line of output goes to ``progress`` (what a run waiting for it says)."""
    import requests

    deadline, last = time.monotonic() + timeout_s, ""
    while True:
        try:
            return int(container.wait(timeout=max(0.1, min(PROGRESS_EVERY_S, deadline - time.monotonic())))
                       ["StatusCode"])
        except (requests.exceptions.ConnectionError, requests.exceptions.ReadTimeout):
            if time.monotonic() >= deadline:
                container.kill()
                return None
        line = container.logs(tail=1).decode("utf-8", "replace").strip()
        if line and line != last:
            progress(line)
            last = line


PROGRESS_EVERY_S = 3.0


def _tail(text: str) -> str:
    return "\n".join(text.rstrip().splitlines()[-_TAIL:])


def _redact(text: str, secrets: Mapping[str, str]) -> str:
    """Setup's output with each secret's value masked: it goes to the service's log and the failed run's error."""
    for name, value in secrets.items():
        if len(value) >= 4:
            text = text.replace(value, f"<{name}>")
    return text


def _tar_of(tree: Path, prefix: str) -> bytes:
    """The repository's files at the run's base, under ``prefix``, owned by root (setup's user)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            return info

        tar.add(str(tree), arcname=prefix, filter=lambda i: None if i.name.split("/")[-1] == ".git" else owned(i))
    return buf.getvalue()


def _seeded(container: Any) -> bool:
    import docker

    try:
        container.get_archive(f"{SEED}/{SEED_MARK}")
        return True
    except docker.errors.NotFound:
        return False


def _changed(container: Any, mounts: list[str]) -> list[str]:
    """The top-most paths setup added or changed (deletions carry nothing), none of them a mount or holding one."""
    skip = ("/proc", "/sys", "/dev", "/tmp", *mounts)

    def mounted(p: str) -> bool:
        return any(p == m or p.startswith(m + "/") or m.startswith(p.rstrip("/") + "/") for m in skip)

    tops: list[str] = []
    for p in sorted(d["Path"] for d in (container.diff() or []) if d.get("Kind") in (0, 1)):
        if mounted(p) or (tops and p.startswith(tops[-1].rstrip("/") + "/")):
            continue
        tops.append(p)
    return tops


def _scan(container: Any, secrets: Mapping[str, str], mounts: list[str]) -> None:
    """Refuse a setup that left a secret's value in a file the prepared image would keep."""
    needles = {name: value.encode() for name, value in secrets.items() if len(value) >= 4}
    if not needles:
        return
    for top in _changed(container, mounts):
        for path, data in _files(container, top, overlap=max(len(n) for n in needles.values()) - 1):
            for name, needle in needles.items():
                if needle in data:
                    raise EnvironmentRefused(
                        f"setup left the secret {name} in {path}: the prepared environment would carry it to every "
                        "run — have setup read it from its environment only (e.g. an .npmrc line "
                        f"`${{{name}}}`, or pip's --index-url from the variable) and not write it down")


def _files(container: Any, top: str, *, overlap: int) -> Iterator[tuple[str, bytes]]:
    """Every regular file under ``top`` in the container, as chunks that overlap by ``overlap`` bytes (a value split
    between two chunks is still whole in one)."""
    stream, _ = container.get_archive(top)
    reader = _StreamReader(stream)
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        parent = str(PurePosixPath(top).parent)
        for member in tar:
            f = tar.extractfile(member) if member.isfile() else None
            if f is None:
                continue
            path, tail = f"{parent.rstrip('/')}/{member.name}", b""
            while chunk := f.read(_SCAN_CHUNK):
                yield path, tail + chunk
                tail = chunk[-overlap:] if overlap > 0 else b""


class _StreamReader(io.RawIOBase):
    """A file over the engine's chunked archive stream (tarfile's streaming mode reads from it)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _safe(name: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.lower()).strip("-.")
    return out[:64] or "tenant"


def _touch(image: Any) -> None:
    """Remember when a prepared image was last used (``prune`` keeps the recent ones)."""
    _used[image.id] = time.time()


_used: dict[str, float] = {}


def prune(cap_bytes: int, client: Any = None) -> list[str]:
    """Remove prepared images, least recently used first (by this process; else oldest), until their total size is
    under ``cap_bytes``; the tags removed. Bases built from a devcontainer's Dockerfile count too. An image a
    container or a prepared image still uses is skipped (the engine refuses)."""
    import docker

    client = client or docker.from_env()
    images = [i for i in client.images.list(filters={"label": "org.flower.env.key"})]
    images.sort(key=lambda i: _used.get(i.id, _created(i)))
    total = sum(int(i.attrs.get("Size") or 0) for i in images)
    removed: list[str] = []
    for image in images:
        if total <= cap_bytes:
            break
        try:
            client.images.remove(image.id, force=False)
        except docker.errors.APIError:
            continue
        total -= int(image.attrs.get("Size") or 0)
        removed.extend(image.tags)
    return removed


def _created(image: Any) -> float:
    from datetime import datetime

    raw = str(image.attrs.get("Created") or "")
    try:
        return datetime.fromisoformat(raw[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return 0.0

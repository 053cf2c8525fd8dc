"""A repository's ``devcontainer.json``, read as the Dev Containers specification means it, and refused where
flower would not do what it asks.

The specification (containers.dev, github.com/devcontainers/spec) is the ecosystem's own way to say "the
environment this repository needs"; flower honours its keys with their meaning instead of a format of its own.
This module only reads: it starts no container, builds nothing and reaches no network. The prepare step takes
a ``DevContainer`` and does the work.

Which file: the specification's precedence (devcontainer-reference.md, "devcontainer.json"):
``.devcontainer/devcontainer.json``, else ``.devcontainer.json``, else ``.devcontainer/<folder>/devcontainer.json``
when exactly one such folder has one. The specification leaves the choice among several to "a mechanism for
users to select one"; flower has none yet, so several are refused with a sentence naming them.

The file is JSON with comments (``//``, ``/* */``) and trailing commas, as the reference CLI accepts.

The repository is untrusted (DESIGN.md, "where trust ends"): no symlink is followed on the way to the file, to
the Dockerfile or to the build context; those paths must stay inside the repository; every file read is a
regular file under a size cap.

Variables (``${…}``, devcontainerjson-reference.md "Variables in devcontainer.json"): ``${localEnv:…}``
(and its old name ``${env:…}``), ``${localHomeFolder}`` and ``${localWorkspaceFolder}`` are the host's, and the
host is never a run's: refused. ``${localWorkspaceFolderBasename}`` is the checkout's folder name, replaced at
load. ``${containerWorkspaceFolder}`` and ``${containerWorkspaceFolderBasename}`` are kept until the prepare step
knows the folder (``DevContainer.in_workspace``); ``${containerEnv:…}`` is for ``remoteEnv`` only, as the
specification says, and is resolved against the container's environment (``DevContainer.remote_env_in``).
Any other ``${…}`` is left as it is, as the reference CLI leaves it (a shell's ``${HOME}`` in a command).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import msgspec

from .errors import DevContainerError
from .runfiles import open_dir, open_file, read_file

__all__ = ["DevContainer", "Build", "Command", "Parallel", "Lifecycle", "DevContainerError", "load", "find", "parse",
           "lockfiles", "is_lockfile", "image_metadata", "IMAGE_LABEL", "HONOURED", "IGNORED", "REFUSED", "LOCATIONS", "LOCKFILES",
           "LOCKFILE_PATTERNS", "MAX_CONFIG", "MAX_DOCKERFILE", "MAX_LOCKFILE"]

MAX_CONFIG = 256 * 1024  # a devcontainer.json is a page of settings
MAX_DOCKERFILE = 1024 * 1024
MAX_LOCKFILE = 64 * 1024 * 1024  # a large monorepo's package-lock.json is tens of MB
MAX_SCAN = 1000  # entries of .devcontainer/ looked at for the one-folder rule

LOCATIONS = (".devcontainer/devcontainer.json", ".devcontainer.json", ".devcontainer/<folder>/devcontainer.json")

# What flower does with each key it honours (the page for teams shows these three tables).
HONOURED: dict[str, str] = {
    "image": "the image the environment starts from",
    "build.dockerfile": "the Dockerfile the environment is built from, relative to the devcontainer.json's folder",
    "build.context": "the build context, relative to the devcontainer.json's folder (default \".\")",
    "build.args": "build arguments",
    "build.target": "the stage of a multi-stage build",
    "dockerFile": "the legacy spelling of build.dockerfile",
    "context": "the legacy spelling of build.context (with dockerFile)",
    "containerEnv": "environment variables of the container: setup, the agent and the judge's checks see them",
    "remoteEnv": "environment variables of the processes flower starts (null unsets one); ${containerEnv:…} allowed",
    "containerUser": "the user the container runs as",
    "remoteUser": "the user setup, the agent and the checks run as (default: containerUser, else the image's)",
    "onCreateCommand": "setup, first",
    "updateContentCommand": "setup, second",
    "postCreateCommand": "setup, third",
    "workspaceFolder": "where the checkout is inside the container",
}

# Keys accepted and left alone, and why that changes nothing a run depends on.
IGNORED: dict[str, str] = {
    "$schema": "the JSON schema of the file",
    "name": "a display name",
    "customizations": "tool-specific settings (the specification's own place for them)",
    "extensions": "VS Code's extensions, from before customizations.vscode: editor-only",
    "settings": "VS Code's settings, from before customizations.vscode: editor-only",
    "secrets": "recommendations shown by an editor; a run's setup secrets come from the tenant's settings",
    "waitFor": "which command an editor waits for; flower waits for every setup command before the agent starts",
    "shutdownAction": "what an editor does on disconnect; flower stops the container when the run ends",
    "portsAttributes": "attributes of forwarded ports, and a run forwards none",
    "otherPortsAttributes": "attributes of forwarded ports, and a run forwards none",
    "updateRemoteUserUID": "flower never changes the image's users",
    "init": "flower decides the container's init process",
}

# Keys flower refuses, each with the sentence a team reads: why, and what to do instead.
REFUSED: dict[str, str] = {
    "features": "Features would be fetched from an OCI registry and installed at prepare time; put what they "
                "install in your Dockerfile (build.dockerfile)",
    "overrideFeatureInstallOrder": "it orders Features, which flower does not install; put what they install in "
                                   "your Dockerfile",
    "forwardPorts": "a run has no ports to forward: its only ways out are flower's gateway and the egress proxy",
    "appPort": "a run has no ports to publish: its only ways out are flower's gateway and the egress proxy",
    "mounts": "a run's mounts are flower's own (the checkout and the run's folders); put files in the image or "
              "the repository",
    "workspaceMount": "flower mounts the checkout itself; workspaceFolder alone says where it is",
    "runArgs": "it passes flags to `docker run`, and the container's flags are flower's; use containerEnv, "
               "containerUser or the Dockerfile",
    "privileged": "a privileged container could leave the sandbox",
    "capAdd": "added kernel capabilities weaken the sandbox's wall",
    "securityOpt": "the container's security options (seccomp, AppArmor) are flower's",
    "dockerComposeFile": "a Docker Compose setup (several containers) is not supported; describe one container "
                         "with image or build",
    "service": "it names a Docker Compose service, and Docker Compose is not supported; use image or build",
    "runServices": "it names Docker Compose services, and Docker Compose is not supported; use image or build",
    "initializeCommand": "it runs on the host, and flower never runs a repository's command outside the sandbox; "
                         "use onCreateCommand",
    "postStartCommand": "it runs at every start, but flower runs setup once and starts later runs from the "
                        "prepared environment; move it to postCreateCommand",
    "postAttachCommand": "it runs when an editor attaches, and a run has no editor; move it to postCreateCommand",
    "hostRequirements": "a run's CPUs, memory and disk come from the tenant's limits, not the repository",
    "userEnvProbe": "flower does not read a shell's profile for its processes' environment; set what they need in "
                    "containerEnv or remoteEnv (or say \"userEnvProbe\": \"none\")",
    "overrideCommand": "flower always runs its own command in the container, never the image's (only true is "
                       "accepted)",
    "build.options": "it passes flags to `docker build`, and the build's flags are flower's",
    "build.cacheFrom": "it would pull cache images from a registry; flower caches the prepared environment itself",
}

# A refused key given the value flower already has (the specification's default, or nothing) is accepted.
_HARMLESS: dict[str, tuple[object, ...]] = {
    "privileged": (False,), "overrideCommand": (True,), "userEnvProbe": ("none",), "features": ({},),
    "forwardPorts": ([],), "appPort": ([],), "mounts": ([],), "runArgs": ([],), "capAdd": ([],),
    "securityOpt": ([],), "build.options": ([],), "build.cacheFrom": ([], ""), "overrideFeatureInstallOrder": ([],),
}

# The well-known lockfiles and manifests at a repository's root: what setup installs from (the cache key's inputs).
LOCKFILES = (
    "package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lock",
    "bun.lockb", ".npmrc", ".yarnrc.yml",
    "pyproject.toml", "poetry.lock", "uv.lock", "Pipfile", "Pipfile.lock", "pdm.lock", "setup.py", "setup.cfg",
    "go.mod", "go.sum", "Cargo.toml", "Cargo.lock", "Gemfile", "Gemfile.lock", "composer.json", "composer.lock",
    "pom.xml", "build.gradle", "build.gradle.kts", "gradle.lockfile", "mix.lock", "pubspec.lock",
    "packages.lock.json", "flake.lock",
)
LOCKFILE_PATTERNS = (re.compile(r"requirements.*\.txt"), re.compile(r"constraints.*\.txt"))

_VARIABLE = re.compile(r"\$\{(.*?)\}")  # the reference CLI's own pattern
_HOST_VARIABLES = {"env", "localEnv", "localHomeFolder", "localWorkspaceFolder"}
_WORKSPACE_VARIABLES = {"containerWorkspaceFolder", "containerWorkspaceFolderBasename"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,511}")
_TARGET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HONOURED_KEYS = {key.split(".")[0] for key in HONOURED}
_LIFECYCLE = {"onCreateCommand": "on_create", "updateContentCommand": "update_content",
              "postCreateCommand": "post_create"}


class Command(msgspec.Struct, frozen=True, tag=True):
    """One command as the file gave it: a string is run by a shell, an array is run as it is, without one."""

    shell: str | None = None
    argv: tuple[str, ...] | None = None

    def args(self) -> tuple[str, ...]:
        """The argv to run: ``/bin/sh -c <string>`` for the string form (the reference CLI's shell)."""
        return ("/bin/sh", "-c", self.shell) if self.shell is not None else (self.argv or ())


class Parallel(msgspec.Struct, frozen=True, tag=True):
    """The object form: named commands the specification runs in parallel; setup fails if any fails."""

    commands: dict[str, Command]


Lifecycle = Command | Parallel


class Build(msgspec.Struct, frozen=True):
    """A Dockerfile build. Paths are repository-relative (POSIX, no ``..``): the checkout's place differs from run
    to run, the repository's files do not — so a ``Build`` is also a stable part of a cache key."""

    dockerfile: str
    context: str = "."
    args: dict[str, str] = {}
    target: str | None = None


class DevContainer(msgspec.Struct, frozen=True):
    """What a devcontainer.json asks, in the specification's meaning; exactly one of ``image`` and ``build``."""

    path: str  # the file, repository-relative
    image: str | None = None
    build: Build | None = None
    container_env: dict[str, str] = {}
    remote_env: dict[str, str | None] = {}
    container_user: str | None = None
    remote_user: str | None = None
    on_create: Lifecycle | None = None
    update_content: Lifecycle | None = None
    post_create: Lifecycle | None = None
    workspace_folder: str | None = None

    def setup(self) -> list[tuple[str, Lifecycle]]:
        """The setup commands in the specification's order, each with its key; the empty ones left out."""
        steps = [(key, getattr(self, field)) for key, field in _LIFECYCLE.items()]
        return [(key, step) for key, step in steps if step is not None]

    def user(self) -> str | None:
        """The user setup and the agent run as: remoteUser, else containerUser, else the image's (None)."""
        return self.remote_user or self.container_user

    def in_workspace(self, folder: str) -> DevContainer:
        """This configuration with ``${containerWorkspaceFolder}`` and its basename replaced, for a checkout at
        ``folder`` inside the container."""
        if not folder.startswith("/") or "\0" in folder:
            raise DevContainerError(self.path, f"the workspace folder {folder!r} must be an absolute path")
        names = {"containerWorkspaceFolder": folder,
                 "containerWorkspaceFolderBasename": posixpath.basename(folder.rstrip("/"))}
        swap = _replacer(lambda name, _args: names.get(name))
        return msgspec.convert(_map_strings(msgspec.to_builtins(self), lambda _where, s: swap(s)), DevContainer)

    def remote_env_in(self, container_env: Mapping[str, str]) -> dict[str, str | None]:
        """``remoteEnv`` with each ``${containerEnv:NAME}`` (or ``${containerEnv:NAME:default}``) replaced from the
        running container's environment; an unset name without a default is empty, as in the reference CLI."""
        def value(name: str, args: list[str]) -> str | None:
            if name != "containerEnv" or not args:
                return None
            return container_env.get(args[0], args[1] if len(args) > 1 else "")
        swap = _replacer(value)
        return {k: None if v is None else swap(v) for k, v in self.remote_env.items()}


# ---------------------------------------------------------------------------------------------------- finding


def _lkind(root: Path, rel: str) -> str:
    """What ``root/rel`` is, never following a symlink on the way: missing, file, dir, symlink or other."""
    here = root
    for part in rel.split("/"):
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return "missing"
        if stat.S_ISLNK(mode):
            return "symlink"
    return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"


def _candidate(root: Path, rel: str) -> bool:
    """True when ``rel`` is a devcontainer.json to take; a symlink or a non-file in its place is refused."""
    kind = _lkind(root, rel)
    if kind == "missing":
        return False
    if kind != "file":
        what = "is, or lies under, a symlink: not followed" if kind == "symlink" else "is not a regular file"
        raise DevContainerError(rel, f"{what} (a repository's devcontainer.json must be a plain file in it)")
    return True


def find(repo_root: Path) -> str | None:
    """The repository-relative path of the devcontainer.json to use (see the module doc), or None when none."""
    for rel in LOCATIONS[:2]:
        if _candidate(repo_root, rel):
            return rel
    kind = _lkind(repo_root, ".devcontainer")
    if kind == "symlink":
        raise DevContainerError(".devcontainer", "is a symlink: not followed")
    if kind != "dir":
        return None
    found = []
    with open_dir(repo_root, ".devcontainer") as dfd, os.scandir(dfd) as it:
        for seen, entry in enumerate(it):
            if seen >= MAX_SCAN:
                break
            if entry.is_dir(follow_symlinks=False):
                rel = f".devcontainer/{entry.name}/devcontainer.json"
                if _candidate(repo_root, rel):
                    found.append(rel)
    if len(found) > 1:
        raise DevContainerError(".devcontainer", "holds several configurations (" + ", ".join(sorted(found)) + ") "
                                "and flower cannot choose: keep one, or put the one to use at "
                                ".devcontainer/devcontainer.json")
    return found[0] if found else None


# ---------------------------------------------------------------------------------------------------- reading


def load(repo_root: Path, text: str | None = None) -> DevContainer | None:
    """The repository's configuration, or None when it has none. ``text``, when given, is the file's content as
    the caller read it (e.g. from git at the run's base); it is parsed as the file found, or as
    ``.devcontainer/devcontainer.json`` when there is none. The Dockerfile and the build context are checked on
    disk under ``repo_root``. Raises DevContainerError with a sentence for anything flower will not do."""
    rel = find(repo_root)
    if text is None:
        if rel is None:
            return None
        text = _read_text(repo_root, rel, MAX_CONFIG)
    config = parse(text, path=rel or LOCATIONS[0], checkout=repo_root.name)
    if config.build is not None:
        _check_build(repo_root, config.path, config.build)
    return config


def _read_text(repo_root: Path, rel: str, limit: int) -> str:
    try:
        raw = read_file(repo_root, rel, limit=limit)
    except FileNotFoundError:
        raise DevContainerError(rel, "is not there") from None
    except OSError as e:
        if e.errno == errno.EFBIG:
            raise DevContainerError(rel, f"is larger than {limit} bytes: not read") from None
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise DevContainerError(rel, "is, or lies under, a symlink: not followed") from None
        raise DevContainerError(rel, f"cannot be read ({e.strerror or e})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DevContainerError(rel, f"is not UTF-8 text (byte {e.start})") from None


def _check_build(repo_root: Path, path: str, build: Build) -> None:
    """The Dockerfile is a plain file and the context a folder, neither reached through a symlink."""
    kind = _lkind(repo_root, build.dockerfile)
    if kind != "file":
        what = {"missing": "is not in the repository", "symlink": "is, or lies under, a symlink: not followed"}
        raise DevContainerError(path, f"the Dockerfile {build.dockerfile} {what.get(kind, 'is not a regular file')}")
    try:
        with open_file(repo_root, build.dockerfile) as fd:
            if os.fstat(fd).st_size > MAX_DOCKERFILE:
                raise DevContainerError(path, f"the Dockerfile {build.dockerfile} is larger than {MAX_DOCKERFILE} "
                                              "bytes")
    except OSError as e:
        raise DevContainerError(path, f"the Dockerfile {build.dockerfile} cannot be read ({e.strerror or e})") from None
    if build.context != ".":
        kind = _lkind(repo_root, build.context)
        if kind != "dir":
            what = {"missing": "is not in the repository", "symlink": "is, or lies under, a symlink: not followed"}
            raise DevContainerError(path, f"the build context {build.context} {what.get(kind, 'is not a folder')}")
        try:
            with open_dir(repo_root, build.context):
                pass
        except OSError as e:
            raise DevContainerError(path, f"the build context {build.context} cannot be opened ({e.strerror or e})"
                                    ) from None


# ---------------------------------------------------------------------------------------------------- JSONC


def _strip_jsonc(text: str, path: str) -> str:
    """``text`` with comments and trailing commas blanked out — every other character, and so every line and
    column, where it was — so that JSON's own errors point into the file as the team wrote it."""
    out = list(text)
    i, n = 0, len(text)
    comma = -1  # a comma whose fate waits on the next significant character
    while i < n:
        c = text[i]
        if c == '"':
            comma = -1
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                line, col = _position(text, i)
                raise DevContainerError(path, "a /* comment is never closed", line=line, column=col)
            end += 2
        else:
            if c in "}]" and comma >= 0:
                out[comma] = " "
            if not c.isspace():
                comma = i if c == "," else -1
            i += 1
            continue
        for j in range(i, end):
            if out[j] != "\n":
                out[j] = " "
        i = end
    return "".join(out)


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    doc: dict[str, object] = {}
    for key, value in pairs:
        if key in doc:
            raise _Duplicate(key)
        doc[key] = value
    return doc


class _Duplicate(Exception):
    pass


def _decode(text: str, path: str) -> dict[str, object]:
    try:
        doc: object = json.loads(_strip_jsonc(text, path), object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise DevContainerError(path, f"is not valid JSON with comments: {e.msg}", line=e.lineno,
                                column=e.colno) from None
    except _Duplicate as e:
        raise DevContainerError(path, f"the key \"{e.args[0]}\" appears twice in one object: keep one") from None
    except RecursionError:
        raise DevContainerError(path, "is nested too deeply") from None
    if not isinstance(doc, dict):
        raise DevContainerError(path, "must hold one JSON object ({ … })")
    return doc


# ---------------------------------------------------------------------------------------------------- meaning


def parse(text: str, *, path: str = LOCATIONS[0], checkout: str = "") -> DevContainer:
    """The configuration ``text`` means, found at repository-relative ``path`` (paths in it are relative to its
    folder); ``checkout`` is the checkout's folder name, for ``${localWorkspaceFolderBasename}``. Pure: nothing on
    disk is looked at (``load`` checks the Dockerfile and the context)."""
    whole = _decode(text.removeprefix("\ufeff"), path)
    _refuse_keys(whole, path)
    honoured = {k: v for k, v in whole.items() if k in _HONOURED_KEYS}  # variables in ignored keys are no concern
    doc = _map_strings(honoured, _variables(path, checkout))
    assert isinstance(doc, dict)
    config = DevContainer(
        path=path,
        image=_image(doc, path),
        build=_build(doc, path),
        container_env={k: v for k, v in _env(doc, "containerEnv", path, nulls=False).items() if v is not None},
        remote_env=_env(doc, "remoteEnv", path, nulls=True),
        container_user=_user(doc, "containerUser", path),
        remote_user=_user(doc, "remoteUser", path),
        on_create=_lifecycle(doc.get("onCreateCommand"), "onCreateCommand", path),
        update_content=_lifecycle(doc.get("updateContentCommand"), "updateContentCommand", path),
        post_create=_lifecycle(doc.get("postCreateCommand"), "postCreateCommand", path),
        workspace_folder=_workspace(doc, path),
    )
    if (config.image is None) == (config.build is None):
        raise DevContainerError(path, "must give exactly one of \"image\" and \"build\" (a Dockerfile): " +
                                ("it gives both" if config.image else "it gives neither"))
    return config


IMAGE_LABEL = "devcontainer.metadata"
"""The image label through which an image (or the Features built into it) carries devcontainer.json keys."""
_METADATA_KEYS = {"containerEnv", "remoteEnv", "containerUser", "remoteUser", *_LIFECYCLE}


def image_metadata(label: str, *, image: str) -> list[DevContainer]:
    """What an image's ``devcontainer.metadata`` label asks, one entry each in its order (the specification's
    "image metadata": a JSON array of objects, or one object). Only the keys a run depends on are read — the
    users, the environment and the lifecycle commands; the label is the image's authors' word, so its other keys
    (a Feature's id, mounts, privileged, capAdd, …) are left alone and never applied, rather than refusing the
    image. DevContainerError for a label that does not parse or a value of the wrong form."""
    where = f"the devcontainer.metadata label of {image}"
    try:
        doc: object = json.loads(label)
    except (json.JSONDecodeError, RecursionError):
        raise DevContainerError(where, "is not valid JSON") from None
    entries = doc if isinstance(doc, list) else [doc]
    out = []
    for n, entry in enumerate(entries):
        path = f"{where} (entry {n + 1})"
        if not isinstance(entry, dict):
            raise DevContainerError(path, "must be a JSON object ({ … })")
        honoured = _map_strings({k: v for k, v in entry.items() if k in _METADATA_KEYS}, _variables(path, ""))
        assert isinstance(honoured, dict)
        out.append(DevContainer(
            path=path,
            container_env={k: v for k, v in _env(honoured, "containerEnv", path, nulls=False).items()
                           if v is not None},
            remote_env=_env(honoured, "remoteEnv", path, nulls=True),
            container_user=_user(honoured, "containerUser", path),
            remote_user=_user(honoured, "remoteUser", path),
            on_create=_lifecycle(honoured.get("onCreateCommand"), "onCreateCommand", path),
            update_content=_lifecycle(honoured.get("updateContentCommand"), "updateContentCommand", path),
            post_create=_lifecycle(honoured.get("postCreateCommand"), "postCreateCommand", path)))
    return out


def _refuse_keys(doc: Mapping[str, object], path: str) -> None:
    """Every key flower does not honour, in one sentence each, joined: the team fixes them all at once."""
    build = doc.get("build")
    # A key of build is looked up as "build.<key>"; a top-level key is never one with a dot in these tables.
    given = [(k, v, "." not in k) for k, v in doc.items()]
    given += [(f"build.{k}", v, True) for k, v in build.items()] if isinstance(build, dict) else []
    problems = []
    for key, value, known in given:
        if known and (key in _HONOURED_KEYS or key in HONOURED or key in IGNORED):
            continue
        if known and key in REFUSED:
            if value not in _HARMLESS.get(key, ()):
                problems.append(f"\"{key}\" is not honoured: {REFUSED[key]}.")
        else:
            problems.append(f"\"{key}\" is not a key of the Dev Containers specification that flower knows; remove "
                            "it (a tool's own settings go under \"customizations\").")
    if problems:
        raise DevContainerError(path, " ".join(problems))


def _variables(path: str, checkout: str) -> Callable[[str, str], str]:
    """The load-time pass over one string value found at ``where``: host variables refused, the checkout's name
    put in, ``${containerEnv:…}`` outside remoteEnv refused, the rest kept."""
    def check(where: str, value: str) -> str:
        def one(m: re.Match[str]) -> str:
            name, *args = m.group(1).split(":")
            if name in _HOST_VARIABLES:
                raise DevContainerError(path, f"{where} uses {m.group(0)}, which is the host's, and the host is never "
                                              "a run's: write the value itself, or ask for it in the tenant's settings")
            if name == "localWorkspaceFolderBasename":
                return checkout
            if name == "containerEnv" and not where.startswith("remoteEnv."):
                raise DevContainerError(path, f"{where} uses {m.group(0)}, but ${{containerEnv:…}} is for remoteEnv "
                                              "only (the specification's rule)")
            if name == "containerEnv" and not args:
                raise DevContainerError(path, f"{where} uses {m.group(0)}, which names no variable")
            if name in _WORKSPACE_VARIABLES and where == "workspaceFolder":
                raise DevContainerError(path, f"workspaceFolder uses {m.group(0)}, which is workspaceFolder itself")
            if name == "devcontainerId":
                raise DevContainerError(path, f"{where} uses ${{devcontainerId}}, which flower does not give")
            return m.group(0)
        return _VARIABLE.sub(one, value)
    return check


def _replacer(value: Callable[[str, list[str]], str | None]) -> Callable[[str], str]:
    """A substitution of ``${name:args}`` by ``value(name, args)``; None keeps the variable as it is."""
    def one(m: re.Match[str]) -> str:
        name, *args = m.group(1).split(":")
        got = value(name, args)
        return m.group(0) if got is None else got
    return lambda s: _VARIABLE.sub(one, s)


def _map_strings(doc: object, f: Callable[[str, str], str]) -> object:
    """``doc`` with every string value (never a key) replaced by ``f(where, value)``; ``where`` is the value's
    dotted key, for a sentence."""
    def walk(node: object, at: str) -> object:
        if isinstance(node, str):
            return f(at, node)
        if isinstance(node, list):
            return [walk(v, at) for v in node]
        if isinstance(node, dict):
            return {k: walk(v, f"{at}.{k}" if at else k) for k, v in node.items()}
        return node
    return walk(doc, "")


def _type_error(path: str, key: str, wanted: str) -> DevContainerError:
    return DevContainerError(path, f"\"{key}\" must be {wanted}")


def _string(doc: Mapping[str, object], key: str, path: str, pattern: re.Pattern[str] | None = None,
            what: str = "a string") -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
        raise _type_error(path, key.replace("/", "."), what)
    return value


def _image(doc: Mapping[str, object], path: str) -> str | None:
    return _string(doc, "image", path, _IMAGE, "an image reference such as \"debian:12\" or "
                                               "\"ghcr.io/org/img@sha256:…\"")


def _user(doc: Mapping[str, object], key: str, path: str) -> str | None:
    return _string(doc, key, path, _USER, "a user name or id (\"node\", \"1000\", \"1000:1000\")")


def _workspace(doc: Mapping[str, object], path: str) -> str | None:
    folder = _string(doc, "workspaceFolder", path)
    if folder is not None and (not folder.startswith("/") or "\0" in folder):
        raise _type_error(path, "workspaceFolder", "an absolute path in the container")
    return folder


def _env(doc: Mapping[str, object], key: str, path: str, *, nulls: bool) -> dict[str, str | None]:
    value = doc.get(key)
    if value is None:
        return {}
    wanted = "an object of names and strings" + (" (or null)" if nulls else "")
    if not isinstance(value, dict):
        raise _type_error(path, key, wanted)
    for name, v in value.items():
        if not _ENV_NAME.fullmatch(name):
            raise DevContainerError(path, f"\"{key}\" names {name!r}, which is not a variable name (letters, digits "
                                          "and '_', not starting with a digit)")
        if not (isinstance(v, str) or (nulls and v is None)) or (isinstance(v, str) and "\0" in v):
            raise _type_error(path, f"{key}.{name}", "a string" + (" or null" if nulls else "") + " without NUL")
    return value


def _rel_path(base: str, value: object, key: str, path: str) -> str:
    """``value`` relative to ``base`` (the devcontainer.json's folder), as a repository-relative POSIX path that
    stays inside the repository."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise _type_error(path, key, "a path relative to the devcontainer.json's folder")
    joined = posixpath.normpath(posixpath.join(base, value))
    if value.startswith("/") or joined == ".." or joined.startswith("../"):
        raise DevContainerError(path, f"\"{key}\" is {value!r}, which leaves the repository: it must stay inside it")
    return joined


def _build(doc: Mapping[str, object], path: str) -> Build | None:
    """``build`` (or the legacy top-level ``dockerFile`` and ``context``), paths made repository-relative."""
    build = doc.get("build", {})
    if not isinstance(build, dict):
        raise _type_error(path, "build", "an object")
    legacy = "dockerFile" in doc
    if legacy and "dockerfile" in build:
        raise DevContainerError(path, "gives both \"dockerFile\" and \"build.dockerfile\": keep build.dockerfile")
    if "context" in doc and not legacy:
        raise DevContainerError(path, "\"context\" goes with the legacy \"dockerFile\"; with \"build\", use "
                                      "\"build.context\"")
    if legacy and "context" in build:
        raise DevContainerError(path, "gives both \"context\" and \"build.context\": keep build.context with "
                                      "build.dockerfile")
    dockerfile = doc.get("dockerFile") if legacy else build.get("dockerfile")
    if dockerfile is None:
        if build:
            raise DevContainerError(path, "\"build\" must name a \"dockerfile\"")
        return None
    base = posixpath.dirname(path) or "."
    keys = ("dockerFile", "context") if legacy else ("build.dockerfile", "build.context")
    args = build.get("args", {})
    if not isinstance(args, dict) or any(not isinstance(v, str) or "\0" in v for v in args.values()):
        raise _type_error(path, "build.args", "an object of names and strings")
    if bad := [k for k in args if not _ENV_NAME.fullmatch(k)]:
        raise DevContainerError(path, f"\"build.args\" names {bad[0]!r}, which is not a build argument name")
    return Build(dockerfile=_rel_path(base, dockerfile, keys[0], path),
                 context=_rel_path(base, doc.get("context", build.get("context", ".")), keys[1], path),
                 args=args, target=_string(build, "target", path, _TARGET, "a build stage's name"))


def _one_command(value: object, key: str, path: str) -> Command | None:
    if isinstance(value, str):
        if "\0" in value:
            raise _type_error(path, key, "a command without NUL")
        return Command(shell=value) if value.strip() else None
    if isinstance(value, list) and all(isinstance(v, str) and "\0" not in v for v in value):
        return Command(argv=tuple(value)) if value else None
    raise _type_error(path, key, "a string (run by a shell), an array of strings (run as it is), or an object of "
                                 "named commands of those kinds")


def _lifecycle(value: object, key: str, path: str) -> Lifecycle | None:
    """A lifecycle command in its form; an empty one (``""``, ``[]``, ``{}``) is nothing to run, as in the CLI."""
    if value is None:
        return None
    if isinstance(value, dict):
        named = {name: _one_command(v, f"{key}.{name}", path) for name, v in value.items()}
        commands = {name: c for name, c in named.items() if c is not None}
        return Parallel(commands=commands) if commands else None
    return _one_command(value, key, path)


# ---------------------------------------------------------------------------------------------------- lockfiles


def lockfiles(repo_root: Path) -> dict[str, str]:
    """``{name: "sha256:<hex>"}`` of the well-known lockfiles and manifests at the repository's root (LOCKFILES,
    LOCKFILE_PATTERNS): part of the prepared environment's cache key. Only regular files count: a symlink or
    anything else in a lockfile's place is left out (never followed). Raises DevContainerError for one larger than
    MAX_LOCKFILE: a key that silently dropped it would reuse a stale environment."""
    digests = {}
    for name in sorted(_lockfile_names(repo_root)):
        try:
            with open_file(repo_root, name) as fd:
                digests[name] = _digest(fd, name)
        except OSError:
            continue  # gone, a symlink, not a regular file, several links: not an input
    return digests


def is_lockfile(name: str) -> bool:
    """Whether a file of that name at a repository's root is one of its lockfiles or manifests (a key input)."""
    return name in LOCKFILES or any(p.fullmatch(name) for p in LOCKFILE_PATTERNS)


def _lockfile_names(repo_root: Path) -> Iterator[str]:
    with open_dir(repo_root) as dfd, os.scandir(dfd) as it:
        for seen, entry in enumerate(it):
            if seen >= 10 * MAX_SCAN:
                break
            if is_lockfile(entry.name) and entry.is_file(follow_symlinks=False):
                yield entry.name


def _digest(fd: int, name: str) -> str:
    size = os.fstat(fd).st_size
    if size > MAX_LOCKFILE:
        raise DevContainerError(name, f"is {size} bytes, over the {MAX_LOCKFILE}-byte cap for a lockfile: the "
                                      "environment's cache key cannot include it")
    h, read = hashlib.sha256(), 0
    while read <= MAX_LOCKFILE and (chunk := os.read(fd, 1024 * 1024)):
        h.update(chunk)
        read += len(chunk)
    return "sha256:" + h.hexdigest()

"""What a team's environment is made of (``Recipe``): the tenant's image and setup, or the repository's own
``devcontainer.json`` — read from the repository at the run's base — and the files its setup depends on.

The devcontainer wins over the tenant's ``image`` (it is the repository's own word); its lifecycle commands
(``onCreateCommand``, ``updateContentCommand``, ``postCreateCommand``, in the specification's order) run first,
then the tenant's ``setup`` lines. ``Recipe.key`` covers everything the prepared image depends on, so a changed
lockfile, command or base image prepares again and nothing else does.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec

from .devcontainer import Build, Command as DcCommand, DevContainer, Lifecycle, Parallel, lockfiles, load

__all__ = ["Recipe", "Build", "Command", "Stage", "recipe_of", "with_image_metadata", "WORKSPACE"]

WORKSPACE = "/workspaces"
"""Where setup finds the checkout (``/workspaces/<repo>``, as the specification's tools put it)."""
_VERSION = "1"  # what prepare does: a change here prepares every environment again

Command = str | list[str]
"""A shell line (``/bin/sh -c``) or an argv (no shell), as the Dev Containers specification has them."""
Stage = dict[str, Command]
"""Commands run at once (the specification's object form); one command alone is named ``""``."""


class Recipe(msgspec.Struct, frozen=True, kw_only=True):
    """What a team's environment is made of: everything its key covers."""

    image: str | None = None
    build: Build | None = None
    stages: list[Stage] = []
    env: dict[str, str] = {}
    user: str | None = None
    inputs: dict[str, str] = {}
    """``path → sha256`` of the files setup reads: the devcontainer file, its Dockerfile, the lockfiles."""

    def key(self, base_id: str) -> str:
        body = msgspec.json.encode({"v": _VERSION, "base": base_id, "build": self.build, "stages": self.stages,
                                    "env": self.env, "user": self.user, "inputs": dict(sorted(self.inputs.items()))})
        return hashlib.sha256(body).hexdigest()[:24]


def recipe_of(tree: Path, *, image: str | None, setup: tuple[str, ...] = (),
              devcontainer: bool = True) -> Recipe | None:
    """The recipe for the repository whose files at the run's base are in ``tree``; None when nothing asks for one
    (no tenant image, no setup, no devcontainer.json): the run uses flower's own image. DevContainerError for a
    devcontainer.json flower will not honour."""
    dc = load(tree) if devcontainer else None
    if dc is None and image is None and not setup:
        return None
    stages: list[Stage] = []
    env: dict[str, str] = {}
    user = None
    inputs = dict(lockfiles(tree))
    build = None
    if dc is not None:
        dc = dc.in_workspace(f"{WORKSPACE}/{tree.name}")
        image, build, user = dc.image, dc.build, dc.user()
        stages = [_stage(key, step) for key, step in dc.setup()]
        env = dict(dc.container_env)
        env.update({k: v for k, v in dc.remote_env_in(env).items() if v is not None})
        inputs[dc.path] = _sha(tree / dc.path)
        if build is not None:
            inputs[build.dockerfile] = _sha(tree / build.dockerfile)
    stages += [{"": line} for line in setup]
    return Recipe(image=image, build=build, stages=stages, env=env, user=user, inputs=inputs)


def with_image_metadata(recipe: Recipe, entries: list[DevContainer], workspace: str) -> Recipe:
    """``recipe`` with its base image's ``devcontainer.metadata`` (``devcontainer.image_metadata``) merged in as
    the specification merges image metadata under a devcontainer.json: the image's lifecycle commands run before
    the repository's (each entry's in the label's order), its environment comes first and the repository's wins a
    name, and its user counts only where the repository names none (its last remoteUser, else its last
    containerUser). The base image is in the key, so the merge needs no key of its own."""
    if not entries:
        return recipe
    entries = [e.in_workspace(workspace) for e in entries]
    stages = [_stage(key, step) for e in entries for key, step in e.setup()]
    env: dict[str, str] = {}
    for e in entries:
        env.update(e.container_env)
        env.update({k: v for k, v in e.remote_env_in(env).items() if v is not None})
    users = ([e.remote_user for e in entries if e.remote_user] or [e.container_user for e in entries
                                                                   if e.container_user])
    return msgspec.structs.replace(recipe, stages=stages + recipe.stages, env={**env, **recipe.env},
                                   user=recipe.user or (users[-1] if users else None))


def _stage(key: str, step: Lifecycle) -> Stage:
    """One lifecycle command as a stage: its commands by name (the object form), or the one named by its key."""
    if isinstance(step, Parallel):
        return {name: _command(c) for name, c in step.commands.items()}
    return {key: _command(step)}


def _command(c: DcCommand) -> Command:
    return c.shell if c.shell is not None else list(c.argv or ())


def _sha(path: Path) -> str:
    """The file's digest (the devcontainer's parser has already refused symlinks and escapes)."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def describe(recipe: Recipe | None, where: str) -> str:
    """What flower will make of a repository's environment, in the words a team checks it by."""
    if recipe is None:
        return (f"{where}: no devcontainer.json, no image, no setup — runs use flower's own image (python3 and git; "
                "nothing of the team's toolchain)\n")
    lines = [f"{where}:"]
    if recipe.build is not None:
        lines.append(f"  image: built from {recipe.build.dockerfile} (context {recipe.build.context}; its RUN lines "
                     "have no network — installs go in setup)")
    else:
        lines.append(f"  image: {recipe.image} (it must be on the service's Docker engine: nothing is pulled)")
    if recipe.user:
        lines.append(f"  user: {recipe.user} (the agent runs as this user; never root)")
    for name, value in sorted(recipe.env.items()):
        lines.append(f"  env: {name}={value}")
    if recipe.stages:
        lines.append("  setup, once per prepared environment, as root, network through the allow-list only:")
        for n, stage in enumerate(recipe.stages, 1):
            for name, command in stage.items():
                shown = command if isinstance(command, str) else " ".join(command)
                lines.append(f"    {n}. {name + ': ' if name else ''}{shown}")
    else:
        lines.append("  setup: none (the image is used as it is)")
    inputs = ", ".join(sorted(recipe.inputs)) or "nothing in the repository"
    lines.append(f"  prepared again when any of these change: the base image, the setup, {inputs}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m sandbox.environment [REPO] [--image IMAGE] [--setup LINE]...``: check a repository's environment
    as the service will read it (its devcontainer.json, and the tenant's image and setup if given)."""
    import argparse
    import sys

    from .errors import DevContainerError

    p = argparse.ArgumentParser(prog="python -m sandbox.environment", description=main.__doc__)
    p.add_argument("repo", nargs="?", default=".", help="the repository's folder (default: here)")
    p.add_argument("--image", help="the tenant's `image`")
    p.add_argument("--setup", action="append", default=[], help="a line of the tenant's `setup` (repeatable)")
    p.add_argument("--no-devcontainer", action="store_true", help="as a tenant with `devcontainer = false`")
    a = p.parse_args(argv)
    repo = Path(a.repo)
    if not repo.is_dir():
        print(f"{repo} is not a folder", file=sys.stderr)
        return 2
    try:
        recipe = recipe_of(repo, image=a.image, setup=tuple(a.setup), devcontainer=not a.no_devcontainer)
    except DevContainerError as e:
        print(f"refused: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(describe(recipe, str(repo)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A team's own base images for the team-environment tests, built here (nothing can be pulled on these machines).

``team_image("node")`` and ``team_image("python")`` return the tag of a Debian bookworm image with the team's
toolchain from Debian's packages, built ``FROM flower/base:bookworm`` (sandbox/image.py's debootstrap base,
built first when missing) with ``docker build --network host`` (apt reaches deb.debian.org). Nothing of flower
is in them: they stand for an image a team would name. Each is cached by tag and carries the digest of its
Dockerfile in the label ``flower-test.recipe``: a changed recipe builds again, an unchanged one never.

- ``flower-test/node:18``: nodejs 18.20 and npm 9.2 (bookworm's: the host's Node 20 is NodeSource's, a package
  source these machines do not reach, so the tag says 18), git and python3 from the base; 565 MB.
- ``flower-test/python:3.11``: python3 3.11, python3-pip and python3-venv (bookworm's; its python is "externally
  managed", so a team installs into a venv); 371 MB.
Both together took 72 s to build the first time here (the base already there), then 0 s.
"""

from __future__ import annotations

import hashlib
import subprocess
from typing import Literal

from _registries import cache_lock

TeamKind = Literal["node", "python"]
BASE = "flower/base:bookworm"
LABEL = "flower-test.recipe"

_APT = ("RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        "{packages} >/dev/null && rm -rf /var/lib/apt/lists/*\n")
RECIPES: dict[TeamKind, tuple[str, str]] = {  # kind → (tag, Dockerfile)
    "node": ("flower-test/node:18", f"FROM {BASE}\n" + _APT.format(packages="nodejs npm")),
    "python": ("flower-test/python:3.11", f"FROM {BASE}\n" + _APT.format(packages="python3 python3-pip python3-venv")),
}


class TeamImageError(RuntimeError):
    pass


def recipe_digest(dockerfile: str) -> str:
    return hashlib.sha256(dockerfile.encode()).hexdigest()[:16]


def _label(tag: str) -> str | None:
    """The image's recipe label, or None when there is no such image."""
    done = subprocess.run(["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL}"}}}}', tag],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def _ensure_base() -> None:
    if _label(BASE) is not None:
        return
    from sandbox.image import build_base

    build_base(BASE)


def team_image(kind: TeamKind) -> str:
    """The tag of the team's ``kind`` image, built once per machine (and again when its recipe changes)."""
    if kind not in RECIPES:
        raise TeamImageError(f"no team image of kind {kind!r}: there are {', '.join(sorted(RECIPES))}")
    tag, dockerfile = RECIPES[kind]
    digest = recipe_digest(dockerfile)
    if _label(tag) == digest:
        return tag
    with cache_lock(f"team-image-{kind}"):  # two sessions on one engine build it once
        if _label(tag) == digest:
            return tag
        _ensure_base()
        done = subprocess.run(["docker", "build", "--network", "host", "--label", f"{LABEL}={digest}", "-t", tag, "-"],
                              input=dockerfile, capture_output=True, text=True)
        if done.returncode != 0:
            raise TeamImageError(f"docker build of {tag} failed (exit {done.returncode}):\n"
                                 f"{(done.stderr or done.stdout)[-3000:]}")
    if _label(tag) != digest:
        raise TeamImageError(f"docker build did not produce {tag} with {LABEL}={digest}")
    return tag

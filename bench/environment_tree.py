"""What finding a kept team environment costs a run's start in a large repository: ``Environments.of`` (it reads
only the top of the tree: lockfiles, devcontainer) beside the whole export every start once made, in the same
process, on the same repository.

    .venv/bin/python bench/environment_tree.py [--mb 200] [--runs 5]

The repository holds ``--mb`` MB under ``src/`` (incompressible, so git stores it as it is) and a package.json;
the tenant has an image and one setup line, prepared once before timing. The baseline is what ``of`` did before:
the whole tree exported, then ``prepare`` finding the kept image. Prints the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sandbox.backends import DockerBackend  # noqa: E402
from sandbox.environment import recipe_of  # noqa: E402
from sandbox.image import build_base, ensure_image  # noqa: E402
from sandbox.prepare import prepare  # noqa: E402
from sandbox.worktree import export_tree  # noqa: E402
from service.config import ServiceConfig  # noqa: E402
from service.control.environments import Environments  # noqa: E402
from service.tenants import Tenant  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    import docker

    build_base()
    client = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="flower-bench-tree-") as tmp:
        repo = Path(tmp) / "big"
        (repo / "src").mkdir(parents=True)
        for i in range(a.mb * 4):  # 256 KB files
            (repo / "src" / f"f{i:05}.bin").write_bytes(os.urandom(256 * 1024))
        (repo / "package.json").write_text('{"name": "big"}\n')
        for argv in (["init", "-q", "-b", "main"], ["add", "."], ["-c", "user.name=b", "-c", "user.email=b@b",
                                                                   "commit", "-qm", "big"]):
            subprocess.run(["git", *argv], cwd=repo, check=True)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True,
                              text=True).stdout.strip()
        team = Tenant(name="bench-tree", token_hash="0" * 64, repo=str(repo), credentials="/c", quota=1,
                      allowed_options=frozenset(), image="flower/base:bookworm", setup=("true",))
        sandbox_image = ensure_image()
        envs = Environments(ServiceConfig(data_dir=str(Path(tmp) / "data"), tenants="t.toml", backend="docker"),
                            DockerBackend(sandbox_image, client=client))
        prepared = envs.of(team, str(repo), head)  # the first time: setup; not timed

        def whole() -> float:
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as t:
                tree = Path(t) / "big"
                tree.mkdir()
                export_tree(repo, head, tree)
                recipe = recipe_of(tree, image=team.image, setup=team.setup)
                assert recipe is not None
                assert prepare(recipe, tree, tenant=team.name, sandbox_image=sandbox_image, client=client) == prepared
            return time.perf_counter() - started

        def light() -> float:
            started = time.perf_counter()
            assert envs.of(team, str(repo), head) == prepared
            return time.perf_counter() - started

        base = statistics.median(whole() for _ in range(a.runs))
        ours = statistics.median(light() for _ in range(a.runs))
        print(f"repository of {a.mb} MB under src/, median of {a.runs}:")
        print(f"  whole export, then the kept environment (before): {base:.3f} s")
        print(f"  Environments.of: the top only (now):              {ours:.3f} s  ({ours / base:.2f}×)")
        for image in client.images.list(name="flower-env/bench-tree"):
            for tag in image.tags:
                client.images.remove(tag, force=True)


if __name__ == "__main__":
    main()

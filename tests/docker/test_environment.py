"""The team's environment (sandbox.prepare): a run in an image that holds nothing of flower's, its setup done once
with a setup-only secret, kept, and reused — through the real CLI against the scripted model."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from flower.testing import ScriptedModel
from sandbox.errors import EnvironmentRefused, SetupFailed
from sandbox.environment import Recipe
from sandbox.prepare import OWNER, prepare
from sandbox.testing import GIT_CHECKED, Person, prepare as prepare_run, read_events, starter_rules

pytestmark = [pytest.mark.docker, pytest.mark.cli]

SECRET = "s3cret-" + uuid.uuid4().hex
# No python, no git: whatever the run needs of flower's comes from its runtime, not from this image.
BARE = "FROM flower/base:bookworm\nRUN rm -f /usr/bin/git /usr/bin/python3* && rm -rf /usr/lib/git-core\n"
PROBE = ("cat /usr/local/share/team-marker; cat node_modules/dep/index.js; echo tok=${TEAM_TOKEN:-none}; "
         f"cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {SECRET}; command -v python3 || echo no-python; "
         f"git --version; id -u; echo {GIT_CHECKED}")


def _image(client, text: str, name: str) -> str:
    tag = f"flower-test/{name}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    try:
        client.images.get(tag)
    except Exception:  # noqa: BLE001 — not built yet
        client.images.build(fileobj=io.BytesIO(text.encode()), tag=tag, rm=True, network_mode="none")
    return tag


@pytest.fixture(scope="module")
def sandbox_image(docker_engine) -> str:
    from sandbox.image import ensure_image

    return ensure_image()


@pytest.fixture(scope="module")
def engine(docker_engine, sandbox_image):
    import docker

    return docker.from_env()


@pytest.fixture(scope="module")
def bare(engine) -> str:
    from sandbox.image import build_base

    build_base()
    return _image(engine, BARE, "bare")


@pytest.fixture
def tenant():
    """A tenant name of its own: its prepared images go with the test."""
    import docker

    name = "t" + uuid.uuid4().hex[:10]
    yield name
    client = docker.from_env()
    for image in client.images.list(name=f"flower-env/{name}"):
        for tag in image.tags:
            client.images.remove(tag, force=True)


def _recipe(image: str, *stages: dict[str, str | list[str]], **kw) -> Recipe:
    return Recipe(image=image, stages=list(stages), **kw)


SETUP = ({"deps": "mkdir -p node_modules/dep && echo 'module.exports = 1' > node_modules/dep/index.js",
          "made": ["sh", "-c", "echo one > made.txt"]},
         {"": 'test "$TEAM_TOKEN" = "' + SECRET + '" && echo installed > /usr/local/share/team-marker'})


def test_a_run_in_the_teams_image_after_a_kept_setup(engine, bare, tenant, sandbox_image, git_workspace: Path,
                                                     tmp_path: Path) -> None:
    from sandbox.backends import DockerBackend

    said: list[str] = []
    recipe = _recipe(bare, *SETUP)
    env = prepare(recipe, git_workspace, tenant=tenant, sandbox_image=sandbox_image, client=engine,
                  secrets={"TEAM_TOKEN": SECRET}, log=said.append)
    assert env.image.startswith(f"flower-env/{tenant}:") and env.seed and env.env["PATH"].endswith("/flower-bin")
    assert any("setup command" in s for s in said) and "$ deps: mkdir" in " ".join(said)

    # the secret is in no layer of the prepared image, nor in its config
    saved = b"".join(engine.images.get(env.image).save(named=True))
    assert SECRET.encode() not in saved
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        for member in outer:
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=outer.extractfile(member)) as layer:
                    for f in layer:
                        if f.isfile():
                            assert SECRET.encode() not in layer.extractfile(f).read(), f.name

    # prepared again: the same image, no setup
    said.clear()
    again = prepare(recipe, git_workspace, tenant=tenant, sandbox_image=sandbox_image, client=engine,
                    secrets={"TEAM_TOKEN": SECRET}, log=said.append)
    assert again == env and any("no setup" in s for s in said)

    # a run in it: the setup's install and the checkout's seed are there, the secret is not, flower's git is
    label = uuid.uuid4().hex[:12]
    backend = DockerBackend(sandbox_image, network_mode="host", labels={"flower.test": label})
    runs, run_id = tmp_path / "runs", "env-run"
    try:
        with ScriptedModel(starter_rules(runs / run_id / git_workspace.name, bash=PROBE)) as model:
            layout, spec = prepare_run(git_workspace, runs, run_id, model, options={"timeout_s": 60})
            import msgspec

            spec = msgspec.structs.replace(spec, environment=env)
            from sandbox.spec import write_spec

            write_spec(layout, spec)
            handle = backend.start(layout, spec)
            with Person(layout.mailbox, ["1"], questions=layout.questions):
                code = backend.wait(handle, 600)  # a limit, not a speed: on four busy workers it took over 180 s
            assert code == 0, backend.logs(handle)[-3000:]
            probe = next(r["text"] for req in model.conversation for r in req.results if GIT_CHECKED in r["text"])
        assert backend.client.containers.get(handle).image.tags == [env.image]
    finally:
        for c in backend.client.containers.list(all=True, filters={"label": f"flower.test={label}"}):
            c.remove(force=True)
    lines = probe.splitlines()
    assert "installed" in lines and "module.exports = 1" in lines, probe
    assert "tok=none" in lines and "0" in lines and "no-python" in lines, probe  # no secret, not even in /proc
    assert any(line.startswith("git version") for line in lines) and "10001" in lines, probe
    assert (layout.workspace / "node_modules" / "dep" / "index.js").is_file()
    assert any(e.get("payload", {}).get("subtype") == "seeded" for e in read_events(layout))


def test_a_failing_setup_fails_with_its_tail_and_keeps_nothing(engine, bare, tenant, sandbox_image,
                                                               git_workspace: Path) -> None:
    recipe = _recipe(bare, {"": "echo resolving deps with $TEAM_TOKEN; echo 'E404 @team/missing not found' >&2; "
                                "exit 3"})
    with pytest.raises(SetupFailed) as e:
        prepare(recipe, git_workspace, tenant=tenant, sandbox_image=sandbox_image, client=engine,
                secrets={"TEAM_TOKEN": SECRET})
    assert e.value.exit_code == 3 and "E404 @team/missing not found" in e.value.tail and "exited 3" in str(e.value)
    assert "resolving deps with <TEAM_TOKEN>" in e.value.tail and SECRET not in e.value.tail  # never echoed back
    assert engine.images.list(name=f"flower-env/{tenant}") == []
    # none of this process's setups is left (another service on the engine may be preparing its own)
    assert engine.containers.list(all=True, filters={"label": f"org.flower.setup.owner={OWNER}"}) == []


def test_a_setup_that_writes_its_secret_down_is_refused(engine, bare, tenant, sandbox_image,
                                                        git_workspace: Path) -> None:
    recipe = _recipe(bare, {"": 'mkdir -p /root && echo "//registry/:_authToken=$TEAM_TOKEN" > /root/.npmrc'})
    with pytest.raises(EnvironmentRefused, match=r"secret TEAM_TOKEN in /root/\.npmrc"):
        prepare(recipe, git_workspace, tenant=tenant, sandbox_image=sandbox_image, client=engine,
                secrets={"TEAM_TOKEN": SECRET})
    assert engine.images.list(name=f"flower-env/{tenant}") == []


def test_images_the_runtime_cannot_live_in_are_refused_by_name(engine, bare, tenant, sandbox_image,
                                                               git_workspace: Path, tmp_path: Path) -> None:
    with pytest.raises(EnvironmentRefused, match="not on this machine: flower pulls nothing"):
        prepare(_recipe("flower-test/absent:nope"), git_workspace, tenant=tenant, sandbox_image=sandbox_image,
                client=engine)
    busybox = subprocess.run(["sh", "-c", "command -v busybox"], capture_output=True, text=True).stdout.strip()
    ctx = tmp_path / "musl"
    ctx.mkdir()
    (ctx / "busybox").write_bytes(Path(busybox).read_bytes())
    (ctx / "busybox").chmod(0o755)
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY busybox /bin/sh\n")
    no_glibc, _ = engine.images.build(path=str(ctx), tag=f"flower-test/noglibc:{tenant}", rm=True,
                                      network_mode="none")
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY busybox /busybox\n")
    no_shell, _ = engine.images.build(path=str(ctx), tag=f"flower-test/noshell:{tenant}", rm=True,
                                      network_mode="none")
    try:
        with pytest.raises(EnvironmentRefused, match="has no glibc"):
            prepare(_recipe(f"flower-test/noglibc:{tenant}"), git_workspace, tenant=tenant,
                    sandbox_image=sandbox_image, client=engine)
        with pytest.raises(EnvironmentRefused, match="has no /bin/sh"):
            prepare(_recipe(f"flower-test/noshell:{tenant}"), git_workspace, tenant=tenant,
                    sandbox_image=sandbox_image, client=engine)
        with pytest.raises(EnvironmentRefused, match="remoteUser 'root' is root"):
            prepare(_recipe(bare, user="root"), git_workspace, tenant=tenant, sandbox_image=sandbox_image,
                    client=engine)
        with pytest.raises(EnvironmentRefused, match="remoteUser '00:1000' is root"):  # a uid spelled otherwise
            prepare(_recipe(bare, user="00:1000"), git_workspace, tenant=tenant, sandbox_image=sandbox_image,
                    client=engine)
        probes = [c for c in engine.containers.list(all=True, filters={"ancestor": no_shell.id})] + \
            [c for c in engine.containers.list(all=True, filters={"ancestor": no_glibc.id})]
        assert probes == [], "a refused image's probe container is removed, also when it could not start"
    finally:
        engine.images.remove(no_glibc.id, force=True)
        engine.images.remove(no_shell.id, force=True)


def _metadata_image(engine, bare: str, entries: list[dict]) -> str:
    import json

    label = json.dumps(json.dumps(entries)).replace("$", "\\$")  # a Dockerfile string, its ${…} not the build's
    return _image(engine, f"FROM {bare}\nRUN useradd -u 1234 -m team\nLABEL devcontainer.metadata={label}\n", "meta")


def test_an_images_devcontainer_metadata_is_merged_under_the_repositorys_word(engine, bare, tenant, sandbox_image,
                                                                                git_workspace: Path) -> None:
    """The specification's image metadata (what a devcontainer image or its Features carry in a label): its
    commands run before the repository's, its environment yields a name to the repository's, its user counts where
    the repository names none; its other keys (a Feature's privileged, capAdd) are not read, so no refusal."""
    order = "/usr/local/share/order"
    image = _metadata_image(engine, bare, [
        {"id": "ghcr.io/example/feature:1", "privileged": True, "capAdd": ["SYS_ADMIN"],
         "onCreateCommand": f"echo image-on-create >> {order}"},
        {"remoteUser": "team", "containerEnv": {"META_ENV": "from-image", "SHARED": "image"},
         "remoteEnv": {"META_PATH": "${containerEnv:META_ENV}/bin"},
         "postCreateCommand": {"in": f"echo image-post ${{containerWorkspaceFolderBasename}} >> {order}"}}])
    said: list[str] = []
    env = prepare(_recipe(image, {"postCreateCommand": f"echo repo-post >> {order}"}, env={"SHARED": "repo"}),
                  git_workspace, tenant=tenant, sandbox_image=sandbox_image, client=engine, log=said.append)
    assert env.user == "1234:1234"
    assert env.env["META_ENV"] == "from-image" and env.env["SHARED"] == "repo"
    assert env.env["META_PATH"] == "from-image/bin"
    ran = engine.containers.run(env.image, ["cat", order], entrypoint=[], user="0:0", network_mode="none",
                                remove=True).decode().split("\n")
    assert ran[:3] == ["image-on-create", f"image-post {git_workspace.name}", "repo-post"], ran
    # the repository's user wins over the image's; an image whose metadata names root leaves the run flower's user
    assert prepare(_recipe(image, user="1000:1000"), git_workspace, tenant=tenant, sandbox_image=sandbox_image,
                   client=engine).user == "1000:1000"
    # the specification's user forms: a name or uid, and a group by name or gid (looked up in the image)
    for spelled, ids in (("team:team", "1234:1234"), ("1234:users", "1234:100"), ("team:50", "1234:50")):
        assert prepare(_recipe(image, user=spelled), git_workspace, tenant=tenant, sandbox_image=sandbox_image,
                       client=engine).user == ids, spelled
    with pytest.raises(EnvironmentRefused, match="names the group 'nobody-here', which is not a group of the image"):
        prepare(_recipe(image, user="team:nobody-here"), git_workspace, tenant=tenant, sandbox_image=sandbox_image,
                client=engine)
    root = _metadata_image(engine, bare, [{"remoteUser": "root"}])
    said.clear()
    assert prepare(_recipe(root), git_workspace, tenant=tenant, sandbox_image=sandbox_image, client=engine,
                   log=said.append).user is None
    assert any("devcontainer.metadata user is not used" in s and "is root" in s for s in said), said


def test_a_kept_environment_reads_only_the_top_of_the_repository(engine, bare, tenant, sandbox_image,
                                                                 git_workspace: Path, tmp_path: Path) -> None:
    """``Environments.of`` (the service's start of a run in its team's environment) exports only the recipe's
    inputs; a setup, or a devcontainer whose Dockerfile lives elsewhere, gets the whole tree. Shown with a real
    fault: once the environment is kept, a blob under ``src/`` is deleted from the object store — a whole export
    would fail, the light one does not."""
    from sandbox.backends import DockerBackend
    from service.config import ServiceConfig
    from service.control.environments import Environments
    from service.tenants import Tenant

    repo = git_workspace
    (repo / "src").mkdir()
    (repo / "src" / "deep.txt").write_text("read by setup\n")
    (repo / "package.json").write_text('{"name": "x"}\n')
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "deep"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()
    envs = Environments(ServiceConfig(data_dir=str(tmp_path / "data"), tenants="t.toml", backend="docker"),
                        DockerBackend(sandbox_image, client=engine))
    team = Tenant(name=tenant, token_hash="0" * 64, repo=str(repo), credentials="/c", quota=1,
                  allowed_options=frozenset(), image=bare, setup=("cp src/deep.txt /usr/local/share/seen",))
    first = envs.of(team, str(repo), head)
    assert first is not None
    seen = engine.containers.run(first.image, ["cat", "/usr/local/share/seen"], entrypoint=[], user="0:0",
                                 network_mode="none", remove=True)
    assert seen == b"read by setup\n"

    blob = subprocess.run(["git", "rev-parse", f"{head}:src/deep.txt"], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    assert envs.of(team, str(repo), head) == first  # kept: nothing under src/ was read

    # a devcontainer whose Dockerfile is outside .devcontainer/: the recipe needs the whole tree, and gets it
    (repo / "src" / "deep.txt").write_text("again\n")
    (repo / "docker").mkdir()
    (repo / "docker" / "Dockerfile").write_text(f"FROM {bare}\nCOPY src/deep.txt /usr/local/share/built\n")
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer" / "devcontainer.json").write_text(
        '{"build": {"dockerfile": "../docker/Dockerfile", "context": ".."}}\n')
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "devcontainer"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()
    built = envs.of(team, str(repo), head)
    assert built is not None
    seen = engine.containers.run(built.image, ["cat", "/usr/local/share/built"], entrypoint=[], user="0:0",
                                 network_mode="none", remove=True)
    assert seen == b"again\n"
    for image in engine.images.list(name=f"flower-env-base/{tenant}"):
        for tag in image.tags:  # untagged: it goes with the prepared image on it (the tenant fixture's)
            engine.images.remove(tag)

"""The test registries (tests/_registries.py) and team images (tests/_team_images.py) do what issue 34's
acceptance leans on: a login reads the team's private package, no login is refused, nothing comes from the
public registries through them, and the team images install from them and run the team's tools."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from _registries import NpmRegistry, PackageIndex, npm_env, pip_env
from _team_images import RECIPES, TeamImageError, team_image

GREET_TEST = "const { greet } = require('@team/greet');\nconsole.log(greet('team'));\n"
CALC_TEST = "from teamcalc import add, mul\n\n\ndef test_teamcalc():\n    assert add(2, 3) == 5 and mul(2, 3) == 6\n"


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    """The HTTP status ``url`` answers with (redirects are not followed: a redirect is an answer too)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(urllib.request.Request(url, headers=headers or {}),
                                                          timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _node_project(path: Path, registry: NpmRegistry, npmrc: str) -> Path:
    path.mkdir(parents=True)
    (path / "package.json").write_text(json.dumps({
        "name": "team-app", "version": "0.0.0", "private": True,
        "dependencies": {registry.package: registry.version}, "scripts": {"test": "node greet.js"}}))
    (path / "greet.js").write_text(GREET_TEST)
    (path / ".npmrc").write_text(npmrc)
    return path


def _npm(project: Path, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["npm", *args], cwd=project, env=npm_env(home, **env), capture_output=True, text=True,
                          timeout=300)


def _pip_install(target: Path, index_url: str, *packages: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "install", "--no-input", "--no-cache-dir", "--no-compile",
                           "--target", str(target), "--index-url", index_url, *packages], env=pip_env(),
                          capture_output=True, text=True, timeout=300)


# -- npm -------------------------------------------------------------------------------------------------
def test_npm_with_the_token_installs_the_team_package(npm_registry: NpmRegistry, tmp_path: Path) -> None:
    project = _node_project(tmp_path / "app", npm_registry, npm_registry.npmrc())
    done = _npm(project, tmp_path / "home", "install", NPM_TOKEN=npm_registry.token)
    assert done.returncode == 0, done.stderr
    installed = json.loads((project / "node_modules" / "@team" / "greet" / "package.json").read_text())
    assert installed["version"] == npm_registry.version
    tested = _npm(project, tmp_path / "home", "test")  # the token gone, as in an agent phase: npm still runs
    assert tested.returncode == 0, tested.stderr
    assert tested.stdout.strip().endswith("hello, team")
    assert npm_registry.token not in (project / ".npmrc").read_text()


def test_npm_without_the_token_is_refused(npm_registry: NpmRegistry, tmp_path: Path) -> None:
    scope_only = f"{npm_registry.scope}:registry={npm_registry.url}\n"  # no token line at all
    anonymous = _node_project(tmp_path / "anonymous", npm_registry, scope_only)
    done = _npm(anonymous, tmp_path / "home", "install")
    assert done.returncode != 0 and "E401" in done.stderr, done.stderr
    assert not (anonymous / "node_modules" / "@team").exists()
    unset = _node_project(tmp_path / "unset", npm_registry, npm_registry.npmrc())  # ${NPM_TOKEN} not in the env
    done = _npm(unset, tmp_path / "home", "install")
    assert done.returncode != 0 and "E401" in done.stderr, done.stderr
    wrong = _npm(unset, tmp_path / "home", "install", NPM_TOKEN=npm_registry.token[:-4] + "AAAA")
    assert wrong.returncode != 0 and "E401" in wrong.stderr, wrong.stderr
    metadata = f"{npm_registry.url}@team%2fgreet"
    assert _status(metadata) == 401
    assert _status(metadata, {"Authorization": f"Bearer {npm_registry.token}"}) == 200


def test_the_npm_registry_proxies_nothing_and_takes_no_new_users(npm_registry: NpmRegistry, tmp_path: Path) -> None:
    """No uplink: a public package is not there even with the token; the one user is the only one there will be."""
    auth = {"Authorization": f"Bearer {npm_registry.token}"}
    assert _status(f"{npm_registry.url}left-pad", auth) == 404
    intruder = {"name": "intruder", "password": "a-long-enough-password-1"}
    signup = urllib.request.Request(f"{npm_registry.url}-/user/org.couchdb.user:intruder", method="PUT",
                                    data=json.dumps(intruder).encode(), headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(signup, timeout=30)
    assert refused.value.code == 403 and b"maximum amount of users reached" in refused.value.read()


# -- Python ----------------------------------------------------------------------------------------------
def test_pip_with_the_login_installs_the_team_package_and_pytest(package_index: PackageIndex, tmp_path: Path) -> None:
    target = tmp_path / "site"
    done = _pip_install(target, package_index.index_url(), f"{package_index.package}=={package_index.version}",
                        "pytest")
    assert done.returncode == 0, done.stderr
    (tmp_path / "test_calc.py").write_text(CALC_TEST)
    tested = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_calc.py"],
                            cwd=tmp_path, env={**pip_env(), "PYTHONPATH": str(target)}, capture_output=True,
                            text=True, timeout=300)
    assert tested.returncode == 0 and "1 passed" in tested.stdout, tested.stdout + tested.stderr
    where = subprocess.run([sys.executable, "-c", "import teamcalc, pytest; print(teamcalc.__file__, pytest.__file__)"],
                           env={**pip_env(), "PYTHONPATH": str(target)}, capture_output=True, text=True).stdout.split()
    assert len(where) == 2 and all(path.startswith(f"{target}/") for path in where), where  # pytest from the index


def test_pip_without_the_login_is_refused(package_index: PackageIndex, tmp_path: Path) -> None:
    done = _pip_install(tmp_path / "site", package_index.url, package_index.package)
    assert done.returncode != 0 and "No matching distribution found for teamcalc" in done.stderr, done.stderr
    assert not (tmp_path / "site").exists()
    wrong = _pip_install(tmp_path / "site", package_index.index_url().replace(package_index.password, "wrong"),
                         package_index.package)
    assert wrong.returncode != 0, wrong.stderr
    wheel = f"http://{package_index.host}:{package_index.port}/packages/teamcalc-1.0.0-py3-none-any.whl"
    for url in (package_index.url, f"{package_index.url}teamcalc/", wheel):  # the file's own URL too
        assert _status(url) == 401, url


def test_the_index_redirects_nothing_to_pypi(package_index: PackageIndex, tmp_path: Path) -> None:
    """No fallback: a name the index does not hold is a 404 with the login, not a redirect to pypi.org."""
    import base64

    login = base64.b64encode(f"{package_index.user}:{package_index.password}".encode()).decode()
    assert _status(f"{package_index.url}requests/", {"Authorization": f"Basic {login}"}) == 404
    assert _status(f"{package_index.url}teamcalc/", {"Authorization": f"Basic {login}"}) == 200
    done = _pip_install(tmp_path / "site", package_index.index_url(), "requests")
    assert done.returncode != 0 and "No matching distribution found for requests" in done.stderr, done.stderr


# -- team images -----------------------------------------------------------------------------------------
def _in_image(tag: str, folder: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a throwaway container of ``tag`` on the host's network (the registries are on 127.0.0.1)."""
    return subprocess.run(["docker", "run", "--rm", "--network", "host", "-v", f"{folder}:/work", "-w", "/work",
                           tag, "sh", "-ec", script], capture_output=True, text=True, timeout=600)


def test_the_node_image_installs_from_the_registry_and_runs_the_tests(docker_engine: None,
                                                                        npm_registry: NpmRegistry,
                                                                        tmp_path: Path) -> None:
    project = _node_project(tmp_path / "app", npm_registry, npm_registry.npmrc())
    tag = team_image("node")
    done = _in_image(tag, project, f"node --version; npm --version; NPM_TOKEN={npm_registry.token} npm install "
                                   "--no-audit --no-fund; npm test; python3 -c 'import flower' 2>/dev/null "
                                   "&& echo flower-inside || echo no-flower")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[0].startswith("v18.") and lines[1].startswith("9.")
    assert "hello, team" in done.stdout and lines[-1] == "no-flower"


def test_the_python_image_installs_from_the_index_in_a_venv_and_runs_pytest(docker_engine: None,
                                                                           package_index: PackageIndex,
                                                                           tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    (project / "test_calc.py").write_text(CALC_TEST)
    tag = team_image("python")
    done = _in_image(tag, project, f"python3 --version; python3 -m venv /tmp/venv; /tmp/venv/bin/pip install -q "
                                   f"--no-input --index-url {package_index.index_url()} teamcalc pytest; "
                                   "/tmp/venv/bin/pytest -q -p no:cacheprovider; "
                                   "python3 -c 'import flower' 2>/dev/null && echo flower-inside || echo no-flower")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Python 3.11.") and "1 passed" in done.stdout, done.stdout
    assert done.stdout.split()[-1] == "no-flower"


def test_a_team_image_is_built_once_and_an_unknown_kind_is_refused(docker_engine: None) -> None:
    first = team_image("python")
    inspect = ["docker", "image", "inspect", "--format", "{{.Id}}", first]
    image_id = subprocess.run(inspect, capture_output=True, text=True, check=True).stdout
    assert team_image("python") == first == RECIPES["python"][0]
    assert subprocess.run(inspect, capture_output=True, text=True, check=True).stdout == image_id  # not rebuilt
    with pytest.raises(TeamImageError, match="no team image of kind 'go': there are node, python"):
        team_image("go")  # type: ignore[arg-type]

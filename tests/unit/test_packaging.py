"""flower as a package people install: a wheel whose name is not Celery Flower's, with its licence, metadata, type
marker and the docs page's files; ``--version`` on every entry point; a bash completion that a real bash sources
and completes with; the remote client's config where XDG says."""

from __future__ import annotations

import email
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import flower
from flower.remote.config import config_path

ROOT = Path(__file__).resolve().parents[2]
DIST = "flower-agents"  # "flower" on PyPI is Celery Flower


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w",
                    str(out), str(ROOT)], check=True, capture_output=True)
    return next(out.glob("*.whl"))


def test_the_wheel_is_named_apart_from_celery_flower_and_carries_licence_types_and_docs(wheel: Path) -> None:
    assert wheel.name.startswith("flower_agents-" + flower.__version__), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(z.read(f"{info}/METADATA"))
        licence = z.read(f"{info}/licenses/LICENSE").decode()
    assert meta["Name"] == DIST and meta["Version"] == flower.__version__
    assert meta["License-Expression"] == "Apache-2.0" and "Apache License" in licence and "Version 2.0" in licence
    assert meta["Author"] and meta["Description-Content-Type"] == "text/markdown" and "# flower" in meta.get_payload()
    assert "Typing :: Typed" in meta.get_all("Classifier") and len(meta.get_all("Classifier")) >= 10
    assert "flower/py.typed" in names, "PEP 561: the library's types ship with it"
    assert {"service/docs/start.js", "service/docs/swagger-ui/swagger-ui-bundle.js",
            "service/docs/swagger-ui/swagger-ui.css", "service/web/index.html"} <= names
    assert f"{info}/licenses/service/docs/swagger-ui/LICENSE" in names, "the vendored viewer's licence too"


def test_every_entry_point_says_its_version() -> None:
    for argv in (["-m", "flower.cli", "--version"], ["-m", "service", "--version"]):
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip().endswith(flower.__version__), (argv, out)
    from importlib.metadata import version

    assert version(DIST) == flower.__version__  # the installed distribution reads the one place it is written


def _bash(script: str) -> list[str]:
    """Lines a real bash prints after sourcing `flower completion bash`."""
    completion = subprocess.run([sys.executable, "-m", "flower.cli", "completion", "bash"], capture_output=True,
                                text=True, timeout=60, check=True).stdout
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", f"source /dev/stdin <<'EOF'\n{completion}EOF\n"
                          + script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_bash_completes_subcommands_flags_and_choices_after_sourcing_the_script() -> None:
    tab = ('t() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _flower; '
           'echo "${COMPREPLY[*]}"; }; complete -p flower; ')
    lines = _bash(tab + 't flower ""; t flower remote l; t flower once -p ""; t flower go --ro; t flower --ver; '
                        't flower -w plu; t flower completion ""; t flower status -')
    assert lines[0] == "complete -F _flower flower"
    assert lines[1].split() == ["go", "run", "once", "status", "ask", "setup", "check", "demo", "remote",
                                "completion"]
    assert lines[2].split() == ["login", "list", "logs"]
    assert lines[3].split() == ["default", "acceptEdits", "plan", "bypassPermissions"]
    assert lines[4:6] == ["--rounds", "--verbose --version"]
    assert lines[6] == "plugin", "a folder for -w"
    assert lines[7] == "bash"
    assert {"--json", "--isolate", "--help", "-w"} <= set(lines[8].split())


def test_completion_for_a_shell_it_does_not_know_says_which_it_knows() -> None:
    out = subprocess.run([sys.executable, "-m", "flower.cli", "completion", "fish"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "'bash'" in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_the_remote_config_follows_xdg_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOWER_REMOTE_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "flower" / "remote.toml"
    default = Path.home() / ".config" / "flower" / "remote.toml"
    for unset in ("", "relative/path"):  # the spec: empty or not absolute is ignored
        monkeypatch.setenv("XDG_CONFIG_HOME", unset)
        assert config_path() == default
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert config_path() == default
    monkeypatch.setenv("FLOWER_REMOTE_CONFIG", str(tmp_path / "named.toml"))
    assert config_path() == tmp_path / "named.toml", "a file named outright still wins"

"""The run's credentials file: 0600, atomic, literal values, and clear refusals that never show a value."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from flower.core.credentials import load_dotenv
from sandbox.envfile import EnvFileError, read_env_file, write_env_file

TRICKY = {
    "ANTHROPIC_API_KEY": "sk-ant-'quoted' \"double\" $HOME $USER} #not-a-comment \\back\\slash \\' \\\\",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/v1?a=b&c=d",
    "EMPTY": "",
    "_UNDER_1": "  spaces kept  ",
}


def test_written_0600_and_read_back_byte_for_byte(tmp_path: Path) -> None:
    path = write_env_file(tmp_path / "run" / "flower.env", TRICKY)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_env_file(path) == TRICKY
    assert [p.name for p in path.parent.iterdir()] == ["flower.env"], "no temp file left behind"


def test_rewriting_replaces_the_whole_file_and_stays_0600(tmp_path: Path) -> None:
    path = tmp_path / "flower.env"
    path.write_text("OLD=1\n")
    os.chmod(path, 0o644)
    write_env_file(path, {"NEW": "2"})
    assert read_env_file(path) == {"NEW": "2"} and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_flowers_own_loader_reads_it_through_FLOWER_ENV(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_env_file(tmp_path / "flower.env", TRICKY)
    monkeypatch.setenv("FLOWER_ENV", str(path))
    for key in TRICKY:
        monkeypatch.delenv(key, raising=False)
    taken = load_dotenv(cwd=tmp_path, home=tmp_path)
    assert os.environ["ANTHROPIC_API_KEY"] == TRICKY["ANTHROPIC_API_KEY"]
    assert os.environ["ANTHROPIC_BASE_URL"] == TRICKY["ANTHROPIC_BASE_URL"]
    assert taken["ANTHROPIC_API_KEY"].startswith("$FLOWER_ENV")
    for key in TRICKY:
        monkeypatch.delenv(key, raising=False)


@pytest.mark.parametrize("key", ["lower", "1ABC", "A-B", "A B", "", "Ä", "A=B"])
def test_bad_keys_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(EnvFileError, match="env key"):
        write_env_file(tmp_path / "e.env", {key: "x"})
    assert not (tmp_path / "e.env").exists()


@pytest.mark.parametrize("value", ["two\nlines", "carriage\rreturn", "nul\0byte", "a${HOME}b"])
def test_values_that_cannot_travel_unchanged_are_refused_without_showing_them(tmp_path: Path, value: str) -> None:
    with pytest.raises(EnvFileError) as info:
        write_env_file(tmp_path / "e.env", {"SECRET_TOKEN": value})
    assert "SECRET_TOKEN" in str(info.value) and value not in str(info.value)
    assert not (tmp_path / "e.env").exists()


def test_a_non_string_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EnvFileError, match="must be a string"):
        write_env_file(tmp_path / "e.env", {"N": 1})  # type: ignore[dict-item]

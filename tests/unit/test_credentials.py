"""Credential priority: one test per level, and the all-places error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from flower.core.credentials import SETTINGS_KEYS, check_credentials, load_dotenv


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    p = {name: tmp_path / name for name in ("cwd", "home", "code", "flower_env")}
    for d in p.values():
        d.mkdir()
    monkeypatch.chdir(p["cwd"])
    return p


def _load(p: dict[str, Path]) -> dict[str, str]:
    return load_dotenv(cwd=p["cwd"], home=p["home"], code_root=p["code"])


def _env(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"ANTHROPIC_API_KEY={value}\n")


def _settings(home: Path, env: dict[str, str]) -> None:
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".claude" / "settings.json").write_text(json.dumps({"env": env, "hooks": {"x": []}}))


def _all_levels(p: dict[str, Path], monkeypatch: pytest.MonkeyPatch, down_to: int) -> None:
    """Put a key at every level from the lowest up to `down_to` (1 = process env)."""
    levels = [
        lambda: monkeypatch.setenv("ANTHROPIC_API_KEY", "from-process"),
        lambda: (_env(p["flower_env"] / "x.env", "from-flower-env"),
                 monkeypatch.setenv("FLOWER_ENV", str(p["flower_env"] / "x.env"))),
        lambda: _env(p["cwd"] / ".env", "from-cwd"),
        lambda: _env(p["home"] / ".config" / "flower" / ".env", "from-config"),
        lambda: _env(p["code"] / ".env", "from-repo"),
        lambda: _settings(p["home"], {"ANTHROPIC_API_KEY": "from-settings"}),
    ]
    for make in levels[down_to - 1:]:
        make()


@pytest.mark.parametrize("level,expected", [
    (1, "from-process"), (2, "from-flower-env"), (3, "from-cwd"),
    (4, "from-config"), (5, "from-repo"), (6, "from-settings"),
])
def test_each_level_wins_over_the_ones_below(places, monkeypatch, level, expected):
    _all_levels(places, monkeypatch, level)
    _load(places)
    assert os.environ["ANTHROPIC_API_KEY"] == expected
    assert check_credentials(cwd=places["cwd"], home=places["home"], code_root=places["code"]) == "ANTHROPIC_API_KEY"


def test_settings_json_lends_only_credential_keys(places, monkeypatch):
    monkeypatch.delenv("SOME_BEHAVIOUR_FLAG", raising=False)
    _settings(places["home"], {"ANTHROPIC_AUTH_TOKEN": "tok", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
                               "SOME_BEHAVIOUR_FLAG": "1", "CLAUDE_CODE_MAX_RETRIES": "99"})
    for k in SETTINGS_KEYS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delenv("CLAUDE_CODE_MAX_RETRIES", raising=False)
    taken = _load(places)
    assert set(taken) == {"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"}
    assert "SOME_BEHAVIOUR_FLAG" not in os.environ and "CLAUDE_CODE_MAX_RETRIES" not in os.environ
    assert len(SETTINGS_KEYS) == 9


def test_nothing_found_names_every_place(places, monkeypatch):
    monkeypatch.setenv("FLOWER_ENV", str(places["flower_env"] / "missing.env"))
    _load(places)
    with pytest.raises(RuntimeError) as err:
        check_credentials(cwd=places["cwd"], home=places["home"], code_root=places["code"])
    msg = str(err.value)
    for where in ("process environment", "missing.env", str(places["cwd"] / ".env"),
                  str(places["home"] / ".config" / "flower" / ".env"), str(places["code"] / ".env"),
                  str(places["home"] / ".claude" / "settings.json")):
        assert where in msg, where


def test_a_broken_settings_file_is_not_fatal(places):
    (places["home"] / ".claude").mkdir()
    (places["home"] / ".claude" / "settings.json").write_text("{not json")
    assert _load(places) == {}


def test_a_secret_with_a_dollar_brace_arrives_unchanged(places, monkeypatch):
    monkeypatch.setenv("HOME_SECRET_PART", "expanded")
    (places["cwd"] / ".env").write_text("ANTHROPIC_API_KEY='sk-${HOME_SECRET_PART}-x'\n")
    _load(places)
    assert os.environ["ANTHROPIC_API_KEY"] == "sk-${HOME_SECRET_PART}-x"

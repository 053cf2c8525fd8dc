"""Where ``flower remote`` finds its service and token: flags over environment over the saved file."""

from __future__ import annotations

from pathlib import Path

import pytest

from flower.remote import RemoteConfig, load_config, save_config


def test_flags_win_over_the_environment_which_wins_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "conf" / "remote.toml"
    saved = save_config(RemoteConfig(server="http://saved:1", token='tok"with\\quotes'), path=path)
    assert saved == path and path.stat().st_mode & 0o777 == 0o600
    monkeypatch.delenv("FLOWER_SERVER", raising=False)
    monkeypatch.delenv("FLOWER_TOKEN", raising=False)
    assert load_config(path=path) == RemoteConfig(server="http://saved:1", token='tok"with\\quotes')
    monkeypatch.setenv("FLOWER_SERVER", "http://env:2")
    assert load_config(path=path) == RemoteConfig(server="http://env:2", token='tok"with\\quotes')
    assert load_config("http://flag:3", "t", path=path) == RemoteConfig(server="http://flag:3", token="t")


def test_a_broken_config_file_says_where_it_is(tmp_path: Path):
    path = tmp_path / "remote.toml"
    path.write_text("server = [unclosed\n")
    with pytest.raises(ValueError, match="remote.toml cannot be read"):
        load_config(path=path)
    path.write_text("server = 5\n")
    with pytest.raises(ValueError, match="flower remote login"):
        load_config(path=path)

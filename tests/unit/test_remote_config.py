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


# -- the token file: 0600, through a fresh temp file, never a planted one ---------------------------------------------
def test_the_token_file_is_0600_in_a_0700_folder_and_a_leftover_temp_file_is_not_reused(tmp_path: Path):
    folder = tmp_path / "home" / ".config" / "flower"
    path = folder / "remote.toml"
    save_config(RemoteConfig(server="http://127.0.0.1:1", token="first"), path=path)
    assert folder.stat().st_mode & 0o777 == 0o700 and path.stat().st_mode & 0o777 == 0o600
    for leftover in (folder / "remote.toml.tmp", folder / ".remote.toml.tmp"):  # a crash's, or planted, world-readable
        leftover.write_text("junk\n")
        leftover.chmod(0o644)
    save_config(RemoteConfig(server="http://127.0.0.1:1", token="second"), path=path)
    assert path.stat().st_mode & 0o777 == 0o600 and "second" in path.read_text()
    assert sorted(p.name for p in folder.iterdir()) == [".remote.toml.tmp", "remote.toml", "remote.toml.tmp"]


def test_a_symlink_planted_where_the_temp_file_or_the_token_file_goes_is_never_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    folder, elsewhere = tmp_path / "conf", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    victims = {name: elsewhere / name for name in ("via-temp", "via-target", "via-random")}
    for victim in victims.values():
        victim.write_text("theirs\n")
    path = folder / "remote.toml"
    (folder / "remote.toml.tmp").symlink_to(victims["via-temp"])
    path.symlink_to(victims["via-target"])
    save_config(RemoteConfig(server="http://127.0.0.1:1", token="tok"), path=path)
    assert not path.is_symlink() and path.stat().st_mode & 0o777 == 0o600 and "tok" in path.read_text()
    # even at the very name it would pick (here made predictable), a planted link is refused, not followed
    monkeypatch.setattr("secrets.token_hex", lambda n: "feedface")
    (folder / ".remote.toml.feedface.tmp").symlink_to(victims["via-random"])
    with pytest.raises(OSError):
        save_config(RemoteConfig(server="http://127.0.0.1:1", token="tok2"), path=path)
    assert all(v.read_text() == "theirs\n" for v in victims.values())
    assert "tok\"" in path.read_text()


# -- the service URL: no credentials in it, never echoed; plain http away from here is said ----------------------------
SECRET_URL = "http://alice:s3cret-pw@127.0.0.1:9"


def test_a_url_with_credentials_is_refused_in_a_sentence_that_does_not_repeat_them():
    from flower.remote import Remote, RemoteError, shown_url

    with pytest.raises(RemoteError) as refused:
        Remote(SECRET_URL, "tok")
    assert "s3cret" not in refused.value.message and "alice" not in refused.value.message
    assert "token" in refused.value.message
    assert shown_url(SECRET_URL + "/v1?x=1") == "http://127.0.0.1:9/v1?x=1"
    assert shown_url("http://bob:pw@[broken") == "[broken"


def _remote_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, home: Path,
                *args: str, **env: str) -> tuple[int, str, str]:
    from flower.cli import main

    for key in ("FLOWER_SERVER", "FLOWER_TOKEN", "FLOWER_REMOTE_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    for key, value in {"HOME": str(home), **env}.items():
        monkeypatch.setenv(key, value)
    code = main(["remote", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_command_never_echoes_url_credentials_and_warns_of_plain_http_to_another_machine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    # credentials in the URL, from the flag or the environment: one sentence, no secret, nothing contacted
    code, out, err = _remote_cli(capsys, monkeypatch, tmp_path, "--server", SECRET_URL, "--token", "t", "list")
    assert code == 1 and "s3cret" not in out + err and "alice" not in out + err, err
    assert err.count("\n") == 1 and "token instead" in err, err
    code, out, err = _remote_cli(capsys, monkeypatch, tmp_path, "login", FLOWER_SERVER=SECRET_URL, FLOWER_TOKEN="t")
    assert code == 1 and "s3cret" not in out + err and "token instead" in err, err
    # plain http to a name that is not this machine: a one-sentence warning (the token-less login then stops there,
    # before any connection); loopback and https are quiet
    code, out, err = _remote_cli(capsys, monkeypatch, tmp_path, "--server", "http://flower.example:8080", "login")
    lines = err.splitlines()
    assert code == 1 and len(lines) == 2 and "plain http" in lines[0] and "use https" in lines[0], err
    assert "no tenant token" in lines[1]
    for quiet in ("http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:2", "https://flower.example"):
        code, out, err = _remote_cli(capsys, monkeypatch, tmp_path, "--server", quiet, "login")
        assert code == 1 and "plain http" not in err and "no tenant token" in err, (quiet, err)
    assert not (tmp_path / ".config" / "flower" / "remote.toml").exists()

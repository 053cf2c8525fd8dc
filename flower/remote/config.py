"""Where ``flower remote`` finds its service and token: flags, then the environment, then a file.

The file is ``$XDG_CONFIG_HOME/flower/remote.toml`` (``~/.config/flower/remote.toml`` when that is unset, empty or
not absolute, as the XDG spec says), ``server = "..."``, ``token = "..."``, written 0600 by ``flower remote login``;
``FLOWER_REMOTE_CONFIG`` names another one.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import msgspec

from .url import BadSetting

CONFIG_FILE = "remote.toml"


class RemoteConfig(msgspec.Struct):
    server: str = ""
    token: str = ""


def config_path(home: Path | None = None) -> Path:
    named = os.environ.get("FLOWER_REMOTE_CONFIG")
    if named:
        return Path(named).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if home is None and os.path.isabs(xdg) else (home or Path.home()) / ".config"
    return base / "flower" / CONFIG_FILE


def load_config(server: str | None = None, token: str | None = None, *, path: Path | None = None) -> RemoteConfig:
    """Flags win over ``FLOWER_SERVER``/``FLOWER_TOKEN``, which win over the file; a broken file says where."""
    saved = RemoteConfig()
    path = path or config_path()
    if path.is_file():
        try:
            saved = msgspec.convert(tomllib.loads(path.read_text(encoding="utf-8")), RemoteConfig)
        except (tomllib.TOMLDecodeError, msgspec.ValidationError, OSError, UnicodeDecodeError) as e:
            raise BadSetting(f"{path} cannot be read ({e}): fix it, or write it again with `flower remote login`",
                             key="config_unreadable", path=str(path), error=str(e)) from None
    return RemoteConfig(server=server or os.environ.get("FLOWER_SERVER") or saved.server,
                        token=token or os.environ.get("FLOWER_TOKEN") or saved.token)


def save_config(config: RemoteConfig, *, path: Path | None = None) -> Path:
    """Written 0600 (it holds a token) in a folder made 0700, through a fresh temp file renamed into place:
    a crash leaves the old file, and a temp file or a symlink found there is never reused or followed."""
    from ..core.files import write_atomic

    path = path or config_path()
    if not path.parent.is_dir():
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        path.parent.mkdir(mode=0o700)
        path.parent.chmod(0o700)  # the mode is not left to the umask
    return write_atomic(path, f"server = {json.dumps(config.server)}\ntoken = {json.dumps(config.token)}\n",
                        private=True, durable=True)

"""A client of the flower service's public REST API — for ``flower remote`` and anyone scripting against it.

It speaks only HTTP (httpx, httpx-sse) and never imports the service: what it knows of the service is
what the API documents. ``Remote`` is the client; ``RunInfo``, ``Question`` and ``StreamEvent`` are the
shapes it decodes (lenient: fields the service adds later are ignored); ``RemoteConfig`` finds the
server and the token (flags, then ``FLOWER_SERVER``/``FLOWER_TOKEN``, then ``~/.config/flower/remote.toml``).
"""

from __future__ import annotations

from .client import Remote, RemoteError
from .config import CONFIG_FILE, RemoteConfig, config_path, load_config, save_config
from .types import DiffFiles, Question, RunInfo, StreamEnd, StreamEvent, TERMINAL
from .url import BadSetting, check_server, in_the_clear, shown_url

__all__ = ["BadSetting", "CONFIG_FILE", "DiffFiles", "Question", "Remote", "RemoteConfig", "RemoteError", "RunInfo",
           "StreamEnd", "StreamEvent", "TERMINAL", "check_server", "config_path", "in_the_clear", "load_config", "save_config",
           "shown_url"]

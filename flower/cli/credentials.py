"""Credentials: found before anything runs; at a terminal, offered to be written (``flower setup``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import Exit
from .messages import t
from .screen import Screen
from .terminal import OUT, ask, echo, isatty, tilde


NO_CREDS = "creds.missing"
"""The catalogue key of the one line said when no credentials are found."""


def _mask(value: str) -> str:
    return value[:4] + "…" if len(value) > 4 else "…"


def require(args: argparse.Namespace, screen: Screen | None = None) -> None:
    """Gate one: credentials must be found. On a terminal, offer to write them; else one line, exit 1."""
    from ..core.credentials import SETTINGS_KEYS, check_credentials, load_dotenv
    from ..core.errors import CredentialsError

    taken = load_dotenv()
    try:
        check_credentials()
    except CredentialsError as e:
        if getattr(args, "verbose", False):
            echo(f"flower: {e}", err=True)
        # configure() returns True only once the token it wrote is in the environment
        if not (isatty(sys.stdin) and OUT.isatty()) or not configure(t("creds.not_yet")):
            raise Exit(1, t(NO_CREDS))
    if getattr(args, "verbose", False) and screen is not None:
        for key in SETTINGS_KEYS:
            value = os.environ.get(key)
            if value:
                shown = _mask(value) if "KEY" in key or "TOKEN" in key else value
                where = taken.get(key, t("creds.process_env"))
                screen.say(f"- {key}={shown}({where})")


def write_env(values: dict[str, str], path: Path | None = None) -> Path:
    """Write the credentials file (whole file, 0600), empty values skipped; returns its path."""
    from ..core.credentials import user_env_file
    from ..core.files import write_atomic

    lines = [t("creds.file_head")]
    lines += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in values.items() if v]
    return write_atomic(path or user_env_file(), "\n".join(lines) + "\n", private=True)


def setup_values(token: str, base_url: str = "", model: str = "") -> dict[str, str]:
    """The keys `flower setup` writes for what the person typed."""
    token, base_url, model = token.strip(), base_url.strip(), model.strip()
    values = {"ANTHROPIC_API_KEY" if token.startswith("sk-ant-") else "ANTHROPIC_AUTH_TOKEN": token}
    if base_url:
        values["ANTHROPIC_BASE_URL"] = base_url
    if model:
        for key in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL"):
            values[key] = model
    return values


def configure(reason: str) -> bool:
    """The interactive configuration; True when a file was written (and loaded)."""
    from ..core.credentials import user_env_file

    path = user_env_file()
    echo(t("creds.title") + "=" * 40)
    echo(reason)
    echo(t("creds.where", path=tilde(path)))
    try:
        token = ask(t("creds.ask_token"))
        if not token.strip():
            echo(t("creds.no_token"), err=True)
            return False
        base = ask(t("creds.ask_base"))
        model = ask(t("creds.ask_model"))
    except (EOFError, KeyboardInterrupt):
        echo(t("creds.cancelled"), err=True)
        return False
    values = setup_values(token, base, model)
    write_env(values, path)
    for key, value in values.items():
        os.environ[key] = value
    echo(t("creds.saved", path=tilde(path)))
    return True

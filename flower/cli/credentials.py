"""Credentials: found before anything runs; at a terminal, offered to be written (``flower setup``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import Exit
from .screen import Screen
from .terminal import isatty, tilde


NO_CREDS = ("缺少凭证:把 ANTHROPIC_API_KEY 或 ANTHROPIC_AUTH_TOKEN export 进环境,或写进 ./.env 或 "
            "~/.config/flower/.env(在终端里跑 `flower setup` 会帮你写)")


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
            print(f"flower: {e}", file=sys.stderr)
        # configure() returns True only once the token it wrote is in the environment
        if not (isatty(sys.stdin) and isatty(sys.stdout)) or not configure("还没配过凭证。"):
            raise Exit(1, NO_CREDS)
    if getattr(args, "verbose", False) and screen is not None:
        for key in SETTINGS_KEYS:
            value = os.environ.get(key)
            if value:
                shown = _mask(value) if "KEY" in key or "TOKEN" in key else value
                where = taken.get(key, "进程环境")
                screen.say(f"- {key}={shown}({where})")


def write_env(values: dict[str, str], path: Path | None = None) -> Path:
    """Write the credentials file (whole file, 0600), empty values skipped; returns its path."""
    from ..core.credentials import user_env_file
    from ..core.files import write_atomic

    lines = ["# 由 `flower setup` 写。里面有凭证:别提交进版本库。"]
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
    print("== 配置 flower " + "=" * 40)
    print(reason)
    print(f"凭证会存到 {tilde(path)}(只你可读)。装一次,处处生效。\n")
    try:
        token = input("1. 你的 API key 或网关 token (Anthropic 官方的 sk-ant-… 或第三方网关签发的)\n   > ")
        if not token.strip():
            print("没给 token,取消。", file=sys.stderr)
            return False
        base = input("\n2. 网关地址 (直接回车 = Anthropic 官方;第三方网关填它的 BASE_URL)\n   > ")
        model = input("\n3. 模型名 (直接回车 = 默认;网关有自己的模型名就填)\n   > ")
    except (EOFError, KeyboardInterrupt):
        print("\n已取消", file=sys.stderr)
        return False
    values = setup_values(token, base, model)
    write_env(values, path)
    for key, value in values.items():
        os.environ[key] = value
    print(f"\n+ 存好了:{tilde(path)}")
    return True

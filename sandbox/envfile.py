"""The run's credentials file: written whole and atomically, mode 0600, read with python-dotenv.

The file is what ``FLOWER_ENV`` names inside a run (flower's ``load_dotenv`` reads it). Values are
written single-quoted, so ``$``, ``#``, quotes and backslashes come back byte for byte. One sequence
cannot: flower's loader expands ``${NAME}`` whatever the quoting (python-dotenv's interpolation, on by
default), so a value containing ``${`` is refused rather than silently changed. Values never appear in
errors or logs — keys do.
"""

from __future__ import annotations

import re
from pathlib import Path

from dotenv import dotenv_values

from flower.core.files import write_atomic

from .errors import EnvFileError

__all__ = ["write_env_file", "read_env_file", "EnvFileError", "ENV_KEY"]

ENV_KEY = re.compile(r"[A-Z_][A-Z0-9_]*")


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def check_env(values: dict[str, str]) -> None:
    """Raise EnvFileError for a key that is not ``[A-Z_][A-Z0-9_]*`` or a value that is not one line."""
    for key, value in values.items():
        if not isinstance(key, str) or not ENV_KEY.fullmatch(key):
            raise EnvFileError(f"env key {key!r} is not valid: use upper-case letters, digits and '_', "
                               "not starting with a digit")
        if not isinstance(value, str):
            raise EnvFileError(f"the value of {key} must be a string, not {type(value).__name__}")
        if any(c in value for c in "\n\r\0"):
            raise EnvFileError(f"the value of {key} contains a line break or NUL: an env value must be one line")
        if "${" in value:
            raise EnvFileError(f"the value of {key} contains '${{', which flower's env loader would expand as a "
                               "variable: such a value cannot travel through an env file unchanged")


def write_env_file(path: str | Path, values: dict[str, str]) -> Path:
    """Write ``values`` as the whole file (0600, temp + rename: a reader never sees half); returns the path."""
    check_env(values)
    body = "# flower run credentials: written by the service, read through FLOWER_ENV. Never commit.\n"
    body += "".join(f"{k}={_quote(v)}\n" for k, v in values.items())
    return write_atomic(path, body, private=True, durable=True)


def read_env_file(path: str | Path) -> dict[str, str]:
    """The file's keys and values, taken literally (no interpolation); keys without a value are left out."""
    return {k: v for k, v in dotenv_values(Path(path), interpolate=False).items() if v is not None}

"""Text for a terminal: model and tool output made safe and short, paths and token counts made readable."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

_ESC = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(text: Any) -> str:
    """Text from the model or a tool, safe for a terminal: escape sequences and control characters go."""
    return _CTRL.sub("", _ESC.sub("", str(text or "")).replace("\r\n", "\n").replace("\r", "\n"))


def one_line(text: Any, limit: int = 160) -> str:
    s = " ".join(clean(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def tokens_k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}K" if tokens < 1_000_000 else f"{tokens / 1_000_000:.2f}M"


def tilde(path: Path | str) -> str:
    s, home = str(path), str(Path.home())
    return "~" + s[len(home):] if home not in ("", "/") and (s == home or s.startswith(home + os.sep)) else s


def isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (ValueError, AttributeError, OSError):
        return False

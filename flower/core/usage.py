"""Token usage: how much context a model call really saw. No SDK and no flower imports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["context_of"]


def context_of(usage: Mapping[str, Any] | None) -> int:
    """input + cache_read + cache_creation: what the model really saw (input_tokens alone undercounts)."""
    if not usage:
        return 0
    return sum(int(usage.get(k) or 0) for k in
               ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))

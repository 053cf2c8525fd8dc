"""Which language a person reads: ``"zh"`` or ``"en"``, from the environment at each call.

Chinese when ``FLOWER_LANG``, else ``LC_ALL``, else ``LC_MESSAGES``, else ``LANG`` starts with ``zh``; English
otherwise. The command's catalogue (``flower.cli.messages``) and the documents written for people
(``flower.docs``) both ask here, so a run's files speak the language its screens speak.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["LANG_VARS", "language"]

LANG_VARS = ("FLOWER_LANG", "LC_ALL", "LC_MESSAGES", "LANG")


def language(env: Mapping[str, str] | None = None) -> str:
    """``"zh"`` or ``"en"``: the first of LANG_VARS that is set decides (``zh_CN.UTF-8``, ``zh`` …)."""
    env = os.environ if env is None else env
    for var in LANG_VARS:
        value = env.get(var)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"

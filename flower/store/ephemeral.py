"""Ephemeral Bash commands on resume: their expiry policy.

The classifier itself (``is_ephemeral``) lives in ``flower.core.shell`` — the guards use it
too, and core does not import the store; it is re-exported here for the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from flower.core.shell import is_ephemeral

__all__ = ["EphemeralPolicy", "is_ephemeral"]


@dataclass
class EphemeralPolicy:
    """Expiry of ephemeral command results on resume (Bash only; Read never expires).

    Counted in tool results, like ``TrimPolicy``: the newest ``keep_recent`` tool
    results of a transcript are exempt (much fewer than trimming's 20 — a ``git status``
    goes stale fast). An older Bash result whose command ``is_ephemeral`` gets its body
    replaced by ``placeholder(cmd, age)`` — dropped, never spilled; ``age`` is how many
    tool results came after it. A result longer than ``max_chars`` is skipped here and
    left whole for ``TrimPolicy`` to spill (it may be worth reading back).
    """

    enabled: bool = True
    keep_recent: int = 6
    max_chars: int = 2000
    text: str = (
        "[{cmd} 的结果已过期(第 {age} 轮前),当前状态可能已变。需要请重新执行]"
    )

    def placeholder(self, cmd: str, age: int) -> str:
        """The body that replaces an expired result: ``text`` with ``{cmd}`` and ``{age}`` filled."""
        return self.text.format(cmd=cmd, age=age)

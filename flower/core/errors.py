"""flower's exceptions: one root, one subclass per area, fields a caller can branch on.

Shaped like the SDK's ``_errors.py``: ``except FlowerError`` catches everything flower
raises on purpose; each area's class carries what a caller needs to decide (which
credential places were looked at, which step, which setting), not only a message.

Where the reference promises a builtin type, the class also derives from it, so
existing ``except RuntimeError`` / ``except ValueError`` callers keep working:
missing credentials are a ``RuntimeError`` (the reference: "si el segundo falla,
lanza RuntimeError"), a bad argument is a ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "FlowerError",
    "ConfigError",
    "ConfigTypeError",
    "CredentialsError",
    "ManifestError",
    "StoreError",
    "WorkflowError",
    "StepError",
    "StepAbort",
]


class FlowerError(Exception):
    """The root of every exception flower raises on purpose."""


class ConfigError(FlowerError, ValueError):
    """A value flower was given cannot work; ``setting`` names it (``"TrimPolicy.spill_dirname"``)."""

    def __init__(self, message: str, *, setting: str = "") -> None:
        super().__init__(message)
        self.setting = setting


class ConfigTypeError(ConfigError, TypeError):
    """A value of the wrong type where a policy object was expected (``setting`` names the parameter)."""


class CredentialsError(FlowerError, RuntimeError):
    """No Anthropic credentials anywhere; ``looked`` lists every place searched, in order."""

    def __init__(self, message: str, *, looked: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.looked: tuple[str, ...] = tuple(looked)


class ManifestError(FlowerError, RuntimeError):
    """``manifest.json`` cannot be read; ``path`` is the file to move aside."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


class StoreError(FlowerError):
    """The session store was misused or misconfigured."""


class WorkflowError(FlowerError):
    """Something about a workflow's steps; ``step`` names the step when there is one."""

    def __init__(self, message: str, *, step: str = "") -> None:
        super().__init__(message)
        self.step = step


class StepError(WorkflowError, ValueError):
    """A Step that cannot run as declared (bad name, on_fail, retries, resume_from)."""


class StepAbort(WorkflowError):
    """Raised by a gate: stop this step now — another round would not help either.

    Returning False means "not this time, go another round"; raising this ends the retry loop at
    once (remaining retries unused), sets ``ctx["_aborted"] = str(exc)`` and follows ``on_fail``.
    """

    def __init__(self, message: str = "", *, step: str = "") -> None:
        super().__init__(message, step=step)

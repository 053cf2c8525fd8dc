"""Exit: how any part of the command stops on purpose — one line to stderr, an exit code, no traceback."""

from __future__ import annotations


class Exit(Exception):
    """A deliberate exit: one line to stderr, no traceback."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code, self.message = code, message

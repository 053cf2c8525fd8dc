"""The scheduler's callbacks, known to the collaborators built before it (``service.wiring``): a budget crossed
(``Budgets``), something to do at once (``Mailbox``, the API's admission, the canary, a finished run). The
scheduler binds them when it is built; until then they do nothing.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Hooks"]


def _nothing() -> None:
    return None


class Hooks:
    def __init__(self) -> None:
        self._wake: Callable[[], None] = _nothing
        self._over_budget: Callable[[str, str], None] = lambda run_id, why: None

    def bind(self, *, wake: Callable[[], None], over_budget: Callable[[str, str], None]) -> None:
        self._wake, self._over_budget = wake, over_budget

    def wake(self) -> None:
        """A pass now rather than at the next poll (a submit, a cancel, a gate opened)."""
        self._wake()

    def over_budget(self, run_id: str, why: str) -> None:
        """``Budgets`` stopped ``run_id``: the next pass stops its sandbox, with ``why``."""
        self._over_budget(run_id, why)

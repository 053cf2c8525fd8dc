"""The scheduler's callbacks, known to the collaborators built before it (``service.wiring``): a budget crossed
(``Budgets``), a lease renewal round done (``Leases``), something to do at once (``Mailbox``, the API's
admission, the canary). The scheduler binds them when it is built; until then they do nothing.
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
        self._renewed: Callable[[], None] = _nothing

    def bind(self, *, wake: Callable[[], None], over_budget: Callable[[str, str], None],
             renewed: Callable[[], None]) -> None:
        self._wake, self._over_budget, self._renewed = wake, over_budget, renewed

    def wake(self) -> None:
        """A pass now rather than at the next poll (a submit, a cancel, a gate opened)."""
        self._wake()

    def over_budget(self, run_id: str, why: str) -> None:
        """``Budgets`` stopped ``run_id``: the next pass stops its sandbox, with ``why``."""
        self._over_budget(run_id, why)

    def renewed(self) -> None:
        """In the lease renewer's thread, after each round: what else lives as long as this replica does."""
        self._renewed()

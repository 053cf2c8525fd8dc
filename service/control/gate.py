"""Whether queued runs may start: the guard canary's word (``service.control.canary``), read by the scheduler before it
starts a queued run and by the API (``POST /v1/runs``, ``/healthz``, ``/metrics``).

Three states: open (runs start), held (the canary is still proving the guards: runs queue and wait) and refused
(the guards did not hold for this CLI: the service takes no runs, with the sentence saying why).
"""

from __future__ import annotations

__all__ = ["Gate"]


class Gate:
    """Written by the canary, read by everyone else; open until told otherwise."""

    def __init__(self) -> None:
        self._held: str | None = None
        self._refused: str | None = None

    def hold(self, why: str) -> None:
        """Queued runs wait (``why``: what they wait for); submits are still taken."""
        self._held, self._refused = why, None

    def refuse(self, why: str) -> None:
        """No run starts and no submit is taken; ``why`` is the sentence the API answers with."""
        self._held, self._refused = None, why

    def open(self) -> None:
        self._held = self._refused = None

    @property
    def held(self) -> str | None:
        """Why queued runs wait, while they do."""
        return self._held

    @property
    def refused(self) -> str | None:
        """Why the service takes no runs, when it takes none."""
        return self._refused

    @property
    def is_open(self) -> bool:
        return self._held is None and self._refused is None

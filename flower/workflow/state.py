"""RunState: what ``Workflow.run`` keeps for itself, typed, apart from the user's context.

The workflow reads and writes this object only. The reference's private context keys
(``ctx["_runtime"]``, ``ctx["_results"]`` …) stay readable for gates and callers written
against them: ``publish`` mirrors the state into the context after every change, and
``adopt`` picks up the dicts a caller put there before the run. Nothing else of the
framework lives in the user's dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from ..core.events import OnEvent
from ..core.lineage import Lineage
from ..core.runtime import Runtime, StepResult

__all__ = ["RunState", "CTX_KEYS"]

CTX_KEYS: Final = ("_runtime", "_on_event", "_sessions", "_results", "_lineage", "_woke", "_aborted", "_failed_at")
"""The private context keys of the reference, all mirrored from a RunState."""


@dataclass
class RunState:
    """One ``Workflow.run``: the runtime and event sink it was given, what each step left behind.

    ``sessions`` ({step: session_id}) and ``results`` ({step: StepResult of its last attempt}) are
    the very dicts in ``ctx["_sessions"]`` / ``ctx["_results"]``. ``woke`` is ``lineage.bump()``
    (0 without a lineage); ``aborted`` the last StepAbort message; ``failed_at`` the step that
    failed with ``on_fail="stop"``.
    """

    runtime: Runtime
    on_event: OnEvent | None = None
    sessions: dict[str, str] = field(default_factory=dict)
    results: dict[str, StepResult] = field(default_factory=dict)
    lineage: Lineage | None = None
    woke: int = 0
    aborted: str | None = None
    failed_at: str | None = None

    @classmethod
    def adopt(cls, ctx: dict[str, Any], runtime: Runtime, on_event: OnEvent | None) -> RunState:
        """A fresh state for a run over ``ctx``, keeping the sessions and results already in it."""
        sessions = ctx.get("_sessions")
        results = ctx.get("_results")
        return cls(runtime, on_event,
                   sessions=sessions if isinstance(sessions, dict) else {},
                   results=results if isinstance(results, dict) else {})

    def publish(self, ctx: dict[str, Any]) -> None:
        """Mirror the state into the reference's private keys (absent ones are removed)."""
        ctx["_runtime"], ctx["_on_event"] = self.runtime, self.on_event
        ctx["_sessions"], ctx["_results"], ctx["_woke"] = self.sessions, self.results, self.woke
        for key, value in (("_lineage", self.lineage), ("_aborted", self.aborted), ("_failed_at", self.failed_at)):
            if value is None:
                ctx.pop(key, None)
            else:
                ctx[key] = value

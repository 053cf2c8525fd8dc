"""One log line per streak: a run (or a peer) that loops on a refusal or a bound must not flood the log — the
bounds' ``gateway.bound`` lines and the wire audit's refusals (``audit.gateway_denied``, ``audit.egress_refused``)."""

from __future__ import annotations

import time

from ..logging import get_logger
from .admission import MAX_IN_FLIGHT, MAX_RUN_BODY_BYTES, Audit, Bound, EgressRefused, Refuse
from .grant import Grant

__all__ = ["Streaks", "STREAK_QUIET_S"]

STREAK_QUIET_S = 60.0  # a bound hit again after this long is a new streak, logged again; within it, not

log = get_logger("flower.service.gateway")
audit_log = get_logger("flower.audit")


class Streaks:
    """One log line per streak of one bound hit by one run or peer: a flood must not flood the log. A streak ends
    when its bound has not been hit for ``STREAK_QUIET_S``."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], float] = {}

    def hit(self, bound: Bound, *, limit: float, run: str | None = None, peer: str | None = None) -> None:
        if self.fresh(bound, run or peer or ""):
            log.warning("gateway.bound", bound=bound, limit=limit, run=run, peer=peer,
                        hint=f"further hits go unlogged until {STREAK_QUIET_S:.0f} s pass without one")

    def fresh(self, kind: str, who: str) -> bool:
        """This hit starts a streak (so it is logged)."""
        now = time.monotonic()
        key = (kind, who)
        last = self._last.get(key)
        self._last[key] = now
        if len(self._last) > 4096:  # peers come and go: forget the streaks that ended
            self._last = {k: t for k, t in self._last.items() if now - t <= STREAK_QUIET_S}
        return last is None or now - last > STREAK_QUIET_S

    def refused(self, grant: Grant, refuse: Refuse) -> None:
        """A call the gateway turns away, logged before the answer goes as its ``audit`` says — once per streak of
        one kind of refusal by one run."""
        if refuse.audit is Audit.BOUND and refuse.bound is not None:
            limits = {"in_flight": MAX_IN_FLIGHT, "run_body_bytes": MAX_RUN_BODY_BYTES}
            self.hit(refuse.bound, limit=limits.get(refuse.bound, 0), run=grant.run_id)
        elif refuse.audit is Audit.DENIED and self.fresh(f"denied-{refuse.status}", grant.run_id):
            audit_log.warning("audit.gateway_denied", tenant=grant.tenant, run=grant.run_id, status=refuse.status,
                              reason=refuse.why[:300], source="wire",
                              hint=f"further denials of this kind go unlogged until {STREAK_QUIET_S:.0f} s pass "
                                   "without one")
        elif isinstance(refuse, EgressRefused) and self.fresh("egress-" + ",".join(refuse.kinds), grant.run_id):
            audit_log.warning("audit.egress_refused", tenant=grant.tenant, run=grant.run_id, status=refuse.status,
                              tools=list(refuse.tools), sources=dict(refuse.sources or {}), source="wire",
                              hint=f"further refusals of this kind go unlogged until {STREAK_QUIET_S:.0f} s pass "
                                   "without one")

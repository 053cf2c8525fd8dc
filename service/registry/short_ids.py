"""A run's short id: what a person types for it.

A run id is ``<date>-<time>-<32 hex digits>`` (sortable, unguessable), so its own first characters are the
same for every run of a day. The short id is the first ``SHORT_LEN`` hex digits instead; admission draws the
id again until no other run of the tenant starts so, which makes it unique per tenant. Any prefix of the hex
part (``MIN_SHORT`` digits or more), any prefix of the whole id, and ``last`` (the tenant's newest run) name a
run too; the whole id always does.
"""

from __future__ import annotations

__all__ = ["HEX_AT", "SHORT_LEN", "MIN_SHORT", "LAST", "short_of"]

HEX_AT = len("20261206-034739-")
"""Where a run id's hex part begins."""
SHORT_LEN = 8
MIN_SHORT = 4
"""The fewest hex digits a typed short id may have (fewer would name half of a busy tenant's runs)."""
LAST = "last"


def short_of(run_id: str) -> str:
    return run_id[HEX_AT:HEX_AT + SHORT_LEN]

"""What a run tells the outside world: one small event type for the UI, the service and logs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Event:
    """kind: step, retry, handoff, interrupt, session, text, tool, result, task, question…"""

    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    step: str = ""
    at: float = field(default_factory=time.time)


OnEvent = Callable[[Event], None]

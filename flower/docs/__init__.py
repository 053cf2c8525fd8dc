"""The four documents: parse a model's reply into fixed sections and persist it."""

from .brief import Brief
from .goal import Goal
from .handoff import Handoff
from .verdict import Verdict

__all__ = ["Brief", "Goal", "Handoff", "Verdict"]

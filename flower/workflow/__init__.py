"""Workflows: steps in order, state passed through one context dict, early exits on purpose.

The framework ships no ready-made flows; ``starter_flow`` is one template that works.
"""

from .base import ON_FAIL, Ctx, Step, StepAbort, Workflow
from .clarify import BRIEF_KEY, CLARIFY_RESUME, MISSING_KEY, clarify_step
from .goal import GOAL_KEY, ROUND_KEY, VERDICT_KEY, VERIFY_PROMPT, goal_step, with_goal
from .starter import StarterPaths, starter_flow, starter_paths, wake_state

__all__ = [
    "Ctx", "Step", "Workflow", "StepAbort", "ON_FAIL",
    "clarify_step", "BRIEF_KEY", "MISSING_KEY", "CLARIFY_RESUME",
    "goal_step", "with_goal", "GOAL_KEY", "VERDICT_KEY", "ROUND_KEY", "VERIFY_PROMPT",
    "starter_flow", "wake_state", "starter_paths", "StarterPaths",
]

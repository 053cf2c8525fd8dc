"""Workflows: steps in order, state passed through one context dict, early exits on purpose.

The framework ships no ready-made flows; ``starter_flow`` is one template that works. Names load on
first use (PEP 562), so ``starter_paths`` and ``wake_state`` come without the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .base import ON_FAIL, Ctx, Step, StepAbort, Workflow
    from .clarify import BRIEF_KEY, CLARIFY_RESUME, MISSING_KEY, clarify_step
    from .goal import GOAL_KEY, ROUND_KEY, VERDICT_KEY, VERIFY_PROMPT, goal_step, with_goal
    from .paths import StarterPaths, starter_paths, wake_state
    from .starter import starter_flow

__all__ = [
    "Ctx", "Step", "Workflow", "StepAbort", "ON_FAIL",
    "clarify_step", "BRIEF_KEY", "MISSING_KEY", "CLARIFY_RESUME",
    "goal_step", "with_goal", "GOAL_KEY", "VERDICT_KEY", "ROUND_KEY", "VERIFY_PROMPT",
    "starter_flow", "wake_state", "starter_paths", "StarterPaths",
]

if not TYPE_CHECKING:  # a type checker sees the imports above, and no __getattr__ that would accept any name
    __getattr__, __dir__ = lazy_exports(__name__, {
        ".base": ["ON_FAIL", "Ctx", "Step", "StepAbort", "Workflow"],
        ".clarify": ["BRIEF_KEY", "CLARIFY_RESUME", "MISSING_KEY", "clarify_step"],
        ".goal": ["GOAL_KEY", "ROUND_KEY", "VERDICT_KEY", "VERIFY_PROMPT", "goal_step", "with_goal"],
        ".paths": ["StarterPaths", "starter_paths", "wake_state"],
        ".starter": ["starter_flow"],
    }, __all__)

"""Workflows: steps in order, state passed through one context dict, early exits on purpose.

The framework ships no ready-made flows; ``starter_flow`` is one template that works. Names load on
first use (PEP 562), so ``starter_paths`` and ``wake_state`` come without the SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

_WHERE: dict[str, str] = {name: module for module, names in {
    ".base": ["ON_FAIL", "Ctx", "Step", "StepAbort", "Workflow"],
    ".clarify": ["BRIEF_KEY", "CLARIFY_RESUME", "MISSING_KEY", "clarify_step"],
    ".goal": ["GOAL_KEY", "ROUND_KEY", "VERDICT_KEY", "VERIFY_PROMPT", "goal_step", "with_goal"],
    ".paths": ["StarterPaths", "starter_paths", "wake_state"],
    ".starter": ["starter_flow"],
}.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'flower.workflow' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

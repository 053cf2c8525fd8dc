"""flower: long-horizon coding agents on claude-agent-sdk that stay honest for hours or days.

The names are loaded on first use (PEP 562): ``import flower.cli`` for ``flower status`` must not pay for
the SDK, and ``from flower import Runtime`` still works as always.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from .core.agent import AgentSpec, CompactPolicy, HandoffPolicy, build_options, default_window
    from .core.channel import Ask, HumanChannel
    from .core.events import Event, normalize
    from .core.guard import (
        delegate_guard,
        index_guard,
        isolate_guard,
        isolated,
        merge_hooks,
        spill_guard,
        wants_isolation,
        whitelist_guard,
        workbench_hooks,
    )
    from .core.lineage import Lineage
    from .core.resilience import Resilience, classify, endpoint, reachable
    from .core.roles import (
        CLARIFIER_RULES,
        COORDINATOR_RULES,
        JUDGE_RULES,
        ORACLE_RULES,
        WORKER_RULES,
        clarify,
        coordinator,
        judge,
        oracle,
        worker,
    )
    from .core.runtime import Runtime, StepResult
    from .core.workbench import Workbench
    from .docs import Brief, Goal, Handoff, Verdict
    from .store import (
        EphemeralPolicy,
        PrunePolicy,
        PruningSessionStore,
        SqliteSessionStore,
        TrimmingSessionStore,
        TrimPolicy,
        is_ephemeral,
        trim_report,
    )
    from .workflow import (
        BRIEF_KEY,
        CLARIFY_RESUME,
        GOAL_KEY,
        MISSING_KEY,
        ROUND_KEY,
        VERDICT_KEY,
        Step,
        StepAbort,
        Workflow,
        clarify_step,
        goal_step,
        starter_flow,
        wake_state,
        with_goal,
    )

__version__ = "0.1.0"

__all__ = [
    # running an agent
    "Runtime", "StepResult",
    # chaining steps
    "Step", "Workflow", "StepAbort", "clarify_step", "goal_step", "with_goal", "starter_flow", "wake_state",
    "BRIEF_KEY", "MISSING_KEY", "CLARIFY_RESUME", "GOAL_KEY", "VERDICT_KEY", "ROUND_KEY",
    # roles
    "coordinator", "worker", "clarify", "judge", "oracle",
    "COORDINATOR_RULES", "WORKER_RULES", "CLARIFIER_RULES", "JUDGE_RULES", "ORACLE_RULES",
    # agent definitions by hand
    "AgentSpec", "build_options", "CompactPolicy", "HandoffPolicy", "default_window",
    # documents
    "Brief", "Handoff", "Goal", "Verdict",
    # hooks
    "whitelist_guard", "delegate_guard", "spill_guard", "index_guard", "isolate_guard",
    "isolated", "wants_isolation", "workbench_hooks", "merge_hooks",
    # workbench
    "Workbench",
    # session store
    "SqliteSessionStore", "TrimmingSessionStore", "PruningSessionStore",
    "TrimPolicy", "EphemeralPolicy", "PrunePolicy", "is_ephemeral", "trim_report",
    # resilience
    "Resilience", "classify", "endpoint", "reachable",
    # events and interaction
    "Event", "normalize", "Ask", "HumanChannel",
    # continuity
    "Lineage",
]

if not TYPE_CHECKING:  # a type checker sees the imports above, and no __getattr__ that would accept any name
    __getattr__, __dir__ = lazy_exports(__name__, {
        ".core.agent": ["AgentSpec", "CompactPolicy", "HandoffPolicy", "build_options", "default_window"],
        ".core.channel": ["Ask", "HumanChannel"],
        ".core.events": ["Event", "normalize"],
        ".core.guard": ["delegate_guard", "index_guard", "isolate_guard", "isolated", "merge_hooks", "spill_guard", "wants_isolation", "whitelist_guard", "workbench_hooks"],
        ".core.lineage": ["Lineage"],
        ".core.resilience": ["Resilience", "classify", "endpoint", "reachable"],
        ".core.roles": ["CLARIFIER_RULES", "COORDINATOR_RULES", "JUDGE_RULES", "ORACLE_RULES", "WORKER_RULES", "clarify", "coordinator", "judge", "oracle", "worker"],
        ".core.runtime": ["Runtime", "StepResult"],
        ".core.workbench": ["Workbench"],
        ".docs": ["Brief", "Goal", "Handoff", "Verdict"],
        ".store": ["EphemeralPolicy", "PrunePolicy", "PruningSessionStore", "SqliteSessionStore", "TrimmingSessionStore", "TrimPolicy", "is_ephemeral", "trim_report"],
        ".workflow": ["BRIEF_KEY", "CLARIFY_RESUME", "GOAL_KEY", "MISSING_KEY", "ROUND_KEY", "VERDICT_KEY", "Step", "StepAbort", "Workflow", "clarify_step", "goal_step", "starter_flow", "wake_state", "with_goal"],
    }, __all__)

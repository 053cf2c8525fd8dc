"""The scripted model: test flows offline against the real Claude Code CLI.

    from flower.testing import ScriptedModel, Rule, say, tool

    rules = [Rule(tool("Write", {"file_path": "/tmp/x/a.txt", "content": "hi"}), prompt="make a.txt"),
             Rule(say("done"), result="File created")]
    with ScriptedModel(rules) as model:
        options = build_options(spec, cwd=..., )
        options.env.update(model.env)
        ...
    model.requests  # every request the CLI sent, for assertions and figures

The real roles, without copying their markers: ``Rule(say(...), role=JUDGE)``, and a whole starter
flow — question → brief → goal → dispatch → the worker writes → verdict — as ``starter_script(...)``.
"""

from .script import Fault, Reply, Request, Rule, ToolUse, call, calls, drop, fail, pattern, say, tool, too_long
from .roles import ACHIEVED, CLARIFIER, COORDINATOR, JUDGE, NOT_ACHIEVED, ORACLE, UNVERIFIABLE, WORKER, Role, starter_script
from .server import ScriptedModel

__all__ = ["ScriptedModel", "Rule", "Request", "Reply", "Fault", "ToolUse",
           "say", "tool", "call", "calls", "fail", "too_long", "drop", "pattern",
           "Role", "CLARIFIER", "JUDGE", "COORDINATOR", "WORKER", "ORACLE", "starter_script",
           "ACHIEVED", "NOT_ACHIEVED", "UNVERIFIABLE"]

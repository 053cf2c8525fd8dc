"""The scripted model: test flows offline against the real Claude Code CLI.

    from flower.testing import ScriptedModel, Rule, say, tool

    rules = [Rule(tool("Write", {"file_path": "/tmp/x/a.txt", "content": "hi"}), prompt="make a.txt"),
             Rule(say("done"), result="File created")]
    with ScriptedModel(rules) as model:
        options = build_options(spec, cwd=..., )
        options.env.update(model.env)
        ...
    model.requests  # every request the CLI sent, for assertions and figures
"""

from .script import Fault, Reply, Request, Rule, ToolUse, call, calls, drop, fail, pattern, say, tool, too_long
from .server import ScriptedModel

__all__ = ["ScriptedModel", "Rule", "Request", "Reply", "Fault", "ToolUse",
           "say", "tool", "call", "calls", "fail", "too_long", "drop", "pattern"]

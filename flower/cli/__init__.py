"""The `flower` command: `flower "an ask"` runs the starter flow here; `flower` again continues it.

Subcommands (``go`` is the default when none is written — ``flower "做 X"`` is ``flower go "做 X"``):

    go      clarify → set the goal → work, judged every round (the starter flow)
    run     a workflow you wrote: ``flower run flows.py:main``
    once    one agent, once: ``flower once "读一眼这个仓库"``
    status  the wake state of this folder, read-only (``--json`` for machines)
    ask     the oracle: ``flower ask "到哪一步了?"`` — a fresh session that never enters the run
    setup   write credentials to ~/.config/flower/.env
    check   are credentials found (no network)
    demo    the main job, offline: the service, a sample repository, the scripted model (``--here``: in-process)
    remote  runs on a flower service: ``flower remote submit "做 X"``, list, show, diff, cancel, logs, attach
    completion  a shell completion script: ``source <(flower completion bash)``

Global flags (before or after the subcommand): ``-w`` workspace, ``-r`` run dir, ``-v``, ``-W``, ``-T``.
Mid-run, the last line of the terminal always takes input: an answer when a question waits, else a
message for the agent's inbox; a line starting with ``?`` asks the oracle. Ctrl-C interrupts the
round and lets you say something; SIGTERM/SIGHUP put the step in flight into the manifest, then exit.

Every word said to a person comes from ``messages`` (English, or Chinese when ``FLOWER_LANG``/``LC_ALL``/
``LANG`` says ``zh``). The modules, each depending only on those listed before it: ``errors``, ``messages``,
``terminal`` (the one writer to a terminal), ``args`` (argv), ``screen`` (what is printed), ``console`` (what is
typed mid-run), ``places`` (workspace, run dir), ``credentials``, ``state`` (a folder's run state), ``oracle``,
``drive`` (a workflow run in front of a person), ``go``, ``demo``, ``commands`` (the rest, and ``main``).
"""

from __future__ import annotations

from .args import CMDS, PERMISSION_MODES, parse, parser, with_default_cmd
from .commands import COMMANDS, cmd_ask, cmd_check, cmd_once, cmd_run, cmd_setup, cmd_status, load_target, main
from .console import ORACLE_WAIT_S, PROMPT_ANSWER, PROMPT_IDLE, PROMPT_INTERRUPT, Console
from .credentials import NO_CREDS, setup_values, write_env
from .errors import Exit
from .go import DONE_PROMPT, EMPTY_ASK, FRESH_PROMPT, WAKE_PROMPT, cmd_go, starter_kwargs
from .messages import MESSAGES, language, t
from .oracle import ORACLE_PROMPT
from .screen import EVENT_TEXT_MAX, EVENTS_FILE, ORACLE_WINDOW, Screen
from .state import read_state
from .terminal import clean

__all__ = [
    "CMDS", "COMMANDS", "DONE_PROMPT", "EMPTY_ASK", "MESSAGES", "language", "t", "EVENT_TEXT_MAX", "EVENTS_FILE", "FRESH_PROMPT", "NO_CREDS", "ORACLE_PROMPT",
    "ORACLE_WAIT_S", "ORACLE_WINDOW", "PERMISSION_MODES", "PROMPT_ANSWER", "PROMPT_IDLE", "PROMPT_INTERRUPT",
    "WAKE_PROMPT", "Console", "Exit", "Screen", "clean", "cmd_ask", "cmd_check", "cmd_go", "cmd_once", "cmd_run",
    "cmd_setup", "cmd_status", "load_target", "main", "parse", "parser", "read_state", "setup_values",
    "starter_kwargs", "with_default_cmd", "write_env",
]

"""RunSpec: what one run is asked to do, as the service hands it to the sandbox (``spec.json``).

``options`` are ``starter_flow`` keyword arguments a client may set; their names and types are checked
against ``starter_flow``'s own signature, so a new parameter there is accepted here without a change.
The workspace and the run dir are the sandbox's to choose, never the client's. One option is the sandbox's
own rather than the flow's: ``verify``, the ask's check command (``RUN_OPTIONS``; it becomes ``RunSpec.verify``).
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from pathlib import Path
from typing import Any, Literal

import msgspec

from flower.core.credentials import SETTINGS_KEYS, TOKEN_KEYS
from flower.core.files import write_atomic

from .envfile import EnvFileError, check_env
from .layout import RunLayout, check_run_id
from .errors import SpecError

__all__ = ["RunSpec", "Resume", "Prepared", "Egress", "SpecError", "write_spec", "read_spec", "check_options",
           "allowed_options", "check_verify", "RUN_OPTIONS"]

# Decided by the sandbox from the run's layout: a client setting them is an error, not a preference.
SET_BY_SANDBOX = {
    "ask": "the ask is the spec's own `ask` field",
    "workspace": "the workspace is the run's git worktree",
    "run_dir": "the run dir is the run's `run/` folder",
}
# Environment names a client may not set through `env`.
RESERVED_ENV = {"FLOWER_ENV", "HOME", "PATH", "PYTHONPATH", "FLOWER_RUN_ID", "FLOWER_TENANT"}
CREDENTIAL_ENV = set(SETTINGS_KEYS) | set(TOKEN_KEYS)
_FILE_NAME = re.compile(r"[^/\\\0]{1,120}")
_NAMES = ("brief_name", "goal_name", "log_name")
# What a run may ask for: enough for days of work, never a number that overflows something downstream.
BOUNDS: dict[str, tuple[float, float, str]] = {
    "rounds": (1, 100, "rounds"),
    "max_asks": (0, 1000, "questions (or null for no limit)"),
    "timeout_s": (0, 7 * 24 * 3600, "seconds (or null to wait forever)"),
}
MAX_NUMBER = 1_000_000_000
MAX_DEPTH = 8
RUN_OPTIONS: dict[str, Any] = {"verify": str}
"""Options the sandbox takes itself, not ``starter_flow``: ``verify`` is the ask's check command (``RunSpec.verify``)."""
MAX_VERIFY = 4000  # characters of a verify command: a command line, not a script


def _depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (iterative: a hostile body cannot recurse us)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break
        if isinstance(item, dict):
            stack += [(v, d + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, d + 1) for v in item]
    return deepest


@functools.cache
def allowed_options() -> dict[str, Any]:
    """``{name: type}`` of every option a client may set: ``starter_flow``'s keywords and ``RUN_OPTIONS``."""
    from flower.workflow.starter import starter_flow  # here: what imports the spec (the gateway) skips the SDK

    hints = typing.get_type_hints(starter_flow)
    params = inspect.signature(starter_flow).parameters
    return {**{name: hints.get(name, Any) for name, p in params.items()
               if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in SET_BY_SANDBOX}, **RUN_OPTIONS}


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options converted to the types ``starter_flow`` takes; SpecError for anything else."""
    if not isinstance(options, dict):
        raise SpecError("options must be an object of starter_flow keyword arguments")
    allowed = allowed_options()
    out: dict[str, Any] = {}
    if _depth(options) > MAX_DEPTH:
        raise SpecError(f"options nest deeper than {MAX_DEPTH} levels: options are flat keyword arguments")
    for name, value in options.items():
        if name in SET_BY_SANDBOX:
            raise SpecError(f"option {name!r} cannot be set by a client: {SET_BY_SANDBOX[name]}")
        if name not in allowed:
            raise SpecError(f"unknown option {name!r}: allowed are {', '.join(sorted(allowed))}")
        try:
            out[name] = msgspec.convert(value, allowed[name])
        except msgspec.ValidationError as e:
            raise SpecError(f"option {name!r}: {e}") from None
    if out.get("isolate") is False:
        raise SpecError("option 'isolate' cannot be false for a service run: the run's git worktree is its "
                        "isolation and the workbench always lives outside it; leave the option out")
    for name, (low, high, unit) in BOUNDS.items():
        if out.get(name) is not None and not low <= out[name] <= high:
            raise SpecError(f"option {name!r} must be from {low} to {high} {unit}".rstrip())
    for name, value in out.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in BOUNDS \
                and not -MAX_NUMBER <= value <= MAX_NUMBER:
            raise SpecError(f"option {name!r} must be between {-MAX_NUMBER} and {MAX_NUMBER}")
    for name in _NAMES:
        if name in out and (not _FILE_NAME.fullmatch(out[name]) or out[name] in (".", "..")):
            raise SpecError(f"option {name!r} must be a plain file name (no '/')")
    if "verify" in out:
        check_verify(out["verify"], "option 'verify'")
    return out


def check_verify(cmd: str, what: str = "verify") -> None:
    """A verify command is one shell command line: not blank, no NUL, at most ``MAX_VERIFY`` characters."""
    if not cmd.strip() or "\0" in cmd or len(cmd) > MAX_VERIFY:
        raise SpecError(f"{what} must be a shell command (e.g. `pytest -q`) of 1 to {MAX_VERIFY} characters, "
                        "without NUL characters")


def check_env_extras(env: dict[str, str]) -> None:
    try:
        check_env(env)
    except EnvFileError as e:
        raise SpecError(str(e)) from None
    for key in env:
        if key in CREDENTIAL_ENV:
            raise SpecError(f"env key {key} is a credential: credentials go in the run's env file, "
                            "never in the spec (the spec is not secret)")
        if key in RESERVED_ENV:
            raise SpecError(f"env key {key} is set by the sandbox and cannot be given in the spec")


Egress = Literal["closed", "open", "proxied"]  # proxied: no network but the allow-list's socket (sandbox.egress)


class Resume(msgspec.Struct, kw_only=True):
    """The run had a sandbox before this one (``RunSpec.resume``): its folder holds its work, sessions and lineage,
    and each step picks up its own session. ``n``: how many sandboxes it had; ``cause``: why it starts again — its
    sandbox was lost (``crashed``, ``vanished``) or it was parked and woken (``unparked``)."""

    n: int
    cause: str
    since_checkpoint_s: float | None = None
    """For a loss: the time from its last checkpoint to the loss (what it may have cost)."""


class Prepared(msgspec.Struct, frozen=True, kw_only=True):
    """The team's environment a run starts in (``sandbox.prepare``): its image with the setup done, and what the
    backend and the runner must know of it. The runner is not in that image: the backend mounts flower's runtime
    (``runtime``, a read-only volume) and starts it from there."""

    image: str
    """The prepared image (its tag); the base image itself when there was no setup."""
    key: str
    """What it was prepared from, hashed (``sandbox.environment.Recipe.key``)."""
    runtime: str
    """The volume holding flower's runtime (python, the runner, the CLI, git), mounted read-only."""
    env: dict[str, str] = {}
    """The image's own environment with the team's ``containerEnv``/``remoteEnv`` on top (PATH included)."""
    user: str | None = None
    """``uid:gid`` the run's processes take (the devcontainer's ``remoteUser``), or None for the backend's."""
    seed: bool = False
    """Setup left files in the checkout (e.g. ``node_modules``): the runner copies them into the run's own."""


class RunSpec(msgspec.Struct):
    """One run: who asks (``tenant``), what (``ask``), how (``options``), non-secret ``env`` extras.

    ``repo_name`` (added by ``write_spec`` from the layout) names the worktree folder, so the
    entrypoint finds its layout from the spec file alone. ``base`` is the commit the run's branch starts
    from: the run hands back its commits past it (``sandbox.checkpoint``); ``objects`` is the team's object
    store its checkout borrows, mounted read-only (``worktree.make_workspace``). ``egress`` "closed" (the
    default) gives the sandbox no network at all — the model is reached through the gateway's socket — "proxied"
    no network either but the allow-list's socket beside it (``sandbox.egress``), and "open" the backend's network.
    ``verify`` is the command the judge's round runs in a copy of the worktree (``sandbox.verify``), stopped after
    ``verify_timeout_s``; None: nothing to run, the judge judges alone. The service sets it from the tenant; an
    ask's own ``verify`` option, when there is one, wins.
    """

    run_id: str
    tenant: str
    ask: str
    options: dict[str, Any] = {}
    env: dict[str, str] = {}
    repo_name: str = ""
    base: str = ""
    objects: str = ""
    egress: Egress = "closed"
    resume: Resume | None = None
    environment: Prepared | None = None
    """The team's environment (``sandbox.prepare``), or None for flower's own image."""
    verify: str | None = None
    verify_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        try:
            check_run_id(self.run_id)
        except ValueError as e:
            raise SpecError(str(e)) from None
        if not self.tenant or len(self.tenant) > 128 or any(ord(c) < 32 for c in self.tenant):
            raise SpecError("tenant must be a non-empty name of at most 128 printable characters")
        if self.base and not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", self.base):
            raise SpecError("base must be a full commit sha")
        self.options = check_options(self.options)
        check_env_extras(self.env)
        if self.options.get("verify") is not None:
            self.verify = self.options["verify"]
        if self.verify is not None:
            check_verify(self.verify)
        if not 1 <= self.verify_timeout_s <= BOUNDS["timeout_s"][1]:
            raise SpecError(f"verify_timeout_s must be from 1 to {BOUNDS['timeout_s'][1]:.0f} seconds")


def write_spec(layout: RunLayout, spec: RunSpec) -> Path:
    """Write ``layout.spec_file`` (temp + rename); the spec's run id must be the layout's."""
    if spec.run_id != layout.run_id:
        raise SpecError(f"the spec is for run {spec.run_id!r} but the layout is run {layout.run_id!r}")
    if spec.repo_name and spec.repo_name != layout.repo_name:
        raise SpecError(f"the spec names repository {spec.repo_name!r} but the layout's is {layout.repo_name!r}")
    spec = msgspec.structs.replace(spec, repo_name=layout.repo_name)
    return write_atomic(layout.spec_file, msgspec.json.format(msgspec.json.encode(spec), indent=2) + b"\n",
                        private=True)


def read_spec(path: str | Path) -> RunSpec:
    """The spec in ``path``; SpecError (one sentence) when it is missing or not a valid spec."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise SpecError(f"cannot read the run spec {path}: {e.strerror or e}") from None
    try:
        return msgspec.json.decode(raw, type=RunSpec)
    except msgspec.ValidationError as e:
        raise SpecError(f"the run spec {path} is not valid: {e}") from None
    except msgspec.DecodeError as e:
        raise SpecError(f"the run spec {path} is not JSON: {e}") from None

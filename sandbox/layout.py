"""RunLayout: where every file of one run lives, from one rule.

```
<root>/<run_id>/                 dir
    <repo_name>/                 workspace — the run's git worktree (branch flower/<run_id>)
    .flower-<repo_name>/         workbench — outside the worktree (flower's isolate rule)
    run/                         run_dir — sessions.db, manifest.json, lineage.json
    mailbox/                     questions/answers/inbox/interrupt.json
    home/                        HOME of the run's process (the CLI's ~/.claude lives here)
    flower.env                   credentials, 0600 (see envfile.py)
    spec.json                    what to run (see spec.py)
    events.jsonl                 one JSON line per flower Event or audit event
    exit.json                    how it ended
```

The workbench path comes from ``flower.workflow.starter_paths(isolate=True)`` — the same function the
starter flow uses — so the two can never disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flower.workflow.starter import starter_paths

__all__ = ["RunLayout", "RUN_ID", "valid_run_id", "check_run_id"]

RUN_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_REPO_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")


def valid_run_id(run_id: object) -> bool:
    return isinstance(run_id, str) and RUN_ID.fullmatch(run_id) is not None


def check_run_id(run_id: object) -> str:
    """The id itself, or ValueError saying what a run id may look like."""
    if not valid_run_id(run_id):
        raise ValueError(f"run id {run_id!r} is not valid: use 1-63 characters of a-z, 0-9 and '-', "
                         "starting with a letter or digit (it becomes a folder and a branch name)")
    return run_id  # type: ignore[return-value]


def _check_repo_name(name: object) -> str:
    if not isinstance(name, str) or not _REPO_NAME.fullmatch(name) or name.startswith(".flower"):
        raise ValueError(f"repository name {name!r} is not valid: use letters, digits, '.', '_' and '-' "
                         "(no '/' and not starting with '.'); it names the worktree folder")
    return name


@dataclass(frozen=True)
class RunLayout:
    """Every path of run ``run_id`` under ``root``; ``ensure()`` creates the folders (not the worktree)."""

    root: Path
    run_id: str
    repo_name: str

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        _check_repo_name(self.repo_name)
        root = Path(self.root).expanduser().resolve()
        object.__setattr__(self, "root", root)
        if self.dir.parent != root:  # belt and braces: the regexes already forbid '/' and '..'
            raise ValueError(f"run {self.run_id!r} would live outside {root}")

    @property
    def dir(self) -> Path:
        return self.root / self.run_id

    @property
    def workspace(self) -> Path:
        """The git worktree the run works in."""
        return self.dir / self.repo_name

    @property
    def workbench(self) -> Path:
        """``<workspace>.parent/.flower-<name>``, exactly where ``starter_flow(isolate=True)`` puts it."""
        return starter_paths(self.workspace, run_dir=self.run_dir, isolate=True).workbench

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    @property
    def mailbox(self) -> Path:
        return self.dir / "mailbox"

    @property
    def home(self) -> Path:
        """HOME of the run's process: nothing of the service's own home reaches a run."""
        return self.dir / "home"

    @property
    def env_file(self) -> Path:
        return self.dir / "flower.env"

    @property
    def spec_file(self) -> Path:
        return self.dir / "spec.json"

    @property
    def events(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def exit_file(self) -> Path:
        return self.dir / "exit.json"

    @property
    def log(self) -> Path:
        """The run process's own stdout/stderr (local backend; Docker keeps them as container logs)."""
        return self.dir / "output.log"

    @property
    def branch(self) -> str:
        """The branch the service conventionally gives the run's worktree."""
        return f"flower/{self.run_id}"

    def ensure(self) -> "RunLayout":
        """Create the run's folders (not the worktree: ``worktree.add_worktree`` makes that)."""
        for d in (self.dir, self.workbench, self.run_dir, self.mailbox, self.home):
            d.mkdir(parents=True, exist_ok=True)
        return self

    @classmethod
    def of_spec_file(cls, spec_file: str | Path, run_id: str, repo_name: str) -> "RunLayout":
        """The layout a spec file sits in (``<root>/<run_id>/spec.json``)."""
        path = Path(spec_file).expanduser().resolve()
        layout = cls(path.parent.parent, run_id, repo_name)
        if layout.spec_file != path:
            raise ValueError(f"{path} is not where run {run_id!r} keeps its spec ({layout.spec_file}): "
                             "a spec file must sit in its run's folder")
        return layout

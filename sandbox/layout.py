"""RunLayout: where every file of one run lives, from one rule.

```
<root>/<folder>/                 dir, 0700, the service's: the run never sees this folder itself
                                 (<folder> is the run id, or the warm slot the run claimed: sandbox/pool.py)
    <repo_name>/                 workspace — the run's own git checkout (branch flower/<run_id>)   run-writable
    .flower-<repo_name>/         workbench — outside the worktree (flower's isolate rule)           run-writable
    run/                         run_dir — sessions.db, manifest.json, lineage.json                 run-writable
    home/                        HOME of the run's process (the CLI's ~/.claude lives here)        run-writable
    outbox/                      what the run hands the service                                    run-writable
        events.jsonl             one JSON line per flower Event or audit event
        exit.json                how it ended
        questions/<id>.json      open questions
        work.bundle              the run's commits since its base (a git bundle), the last checkpoint
    mailbox/                     what the service hands the run                                    read-only inside
        spec.json                what to run (see spec.py); a warm sandbox waits for it to appear
        flower.env               the run's gateway token and settings, 0600; removed at the end
        answers/, inbox/, interrupt.json
    gateway/gateway.sock         the model gateway, this run's only way out (service/gateway/)    read-only inside
    output.log                   the local backend's stdout/stderr of the run
```

Everything the service hands over lives in the one read-only folder ``mailbox/``, so a sandbox started
before its run exists (a warm one) sees the spec and the env file the moment they are written.

The split is the trust boundary: whatever is run-writable is read by the service as hostile data
(``sandbox.runfiles``), and the service writes only into the mailbox, which the run cannot change.

The workbench path comes from ``flower.workflow.starter_paths(isolate=True)`` — the same function the
starter flow uses — so the two can never disagree.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunLayout", "RUN_ID", "valid_run_id", "check_run_id", "local_handle", "folder_of"]

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


def local_handle(handle: str) -> tuple[int, int, Path] | None:
    """(pid, start time, run folder) of a local backend handle (``local:<pid>:<start>:<folder>``); None for a
    handle of another backend. Here, not in the backend: the registry checks what a row's handle names."""
    try:
        kind, pid, start, folder = handle.split(":", 3)
        return (int(pid), int(start), Path(folder)) if kind == "local" else None
    except ValueError:
        return None


def folder_of(handle: str) -> Path | None:
    """The run folder a local handle names; None for a handle of another backend."""
    parsed = local_handle(handle)
    return parsed[2] if parsed is not None else None


def _check_repo_name(name: object) -> str:
    if not isinstance(name, str) or not _REPO_NAME.fullmatch(name) or name.startswith(".flower"):
        raise ValueError(f"repository name {name!r} is not valid: use letters, digits, '.', '_' and '-' "
                         "(no '/' and not starting with '.'); it names the worktree folder")
    return name


@dataclass(frozen=True)
class RunLayout:
    """Every path of run ``run_id`` under ``root``; ``ensure()`` creates the folders (not the worktree).

    ``folder`` names the run's folder when it is not the run id: a run that claimed a warm sandbox lives in
    the folder the sandbox was started on (its mounts cannot move)."""

    root: Path
    run_id: str
    repo_name: str
    folder: str = ""

    def __post_init__(self) -> None:
        check_run_id(self.run_id)
        _check_repo_name(self.repo_name)
        if self.folder:
            check_run_id(self.folder)
        root = Path(self.root).expanduser().resolve()
        object.__setattr__(self, "root", root)
        if self.dir.parent != root:  # belt and braces: the regexes already forbid '/' and '..'
            raise ValueError(f"run {self.run_id!r} would live outside {root}")

    @property
    def dir(self) -> Path:
        return self.root / (self.folder or self.run_id)

    @property
    def workspace(self) -> Path:
        """The git worktree the run works in."""
        return self.dir / self.repo_name

    @property
    def workbench(self) -> Path:
        """``<workspace>.parent/.flower-<name>``, exactly where ``starter_flow(isolate=True)`` puts it."""
        from flower.workflow.starter import starter_paths  # here: the gateway's process starts without the SDK

        return starter_paths(self.workspace, run_dir=self.run_dir, isolate=True).workbench

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    @property
    def mailbox(self) -> Path:
        """Answers, messages and interrupts from the service; read-only inside the sandbox."""
        return self.dir / "mailbox"

    @property
    def outbox(self) -> Path:
        """Everything the run hands back: events, exit, questions, its work as a git bundle."""
        return self.dir / "outbox"

    @property
    def questions(self) -> Path:
        return self.outbox / "questions"

    @property
    def bundle(self) -> Path:
        return self.outbox / "work.bundle"

    @property
    def gateway(self) -> Path:
        """The service's model gateway socket lives here (service-owned, read-only inside the run)."""
        return self.dir / "gateway"

    @property
    def home(self) -> Path:
        """HOME of the run's process: nothing of the service's own home reaches a run."""
        return self.dir / "home"

    @property
    def env_file(self) -> Path:
        return self.mailbox / "flower.env"

    @property
    def spec_file(self) -> Path:
        return self.mailbox / "spec.json"

    @property
    def events(self) -> Path:
        return self.outbox / "events.jsonl"

    @property
    def exit_file(self) -> Path:
        return self.outbox / "exit.json"

    @property
    def log(self) -> Path:
        """The run process's own stdout/stderr (local backend; Docker keeps them as container logs)."""
        return self.dir / "output.log"

    @property
    def branch(self) -> str:
        """The branch the service conventionally gives the run's worktree."""
        return f"flower/{self.run_id}"

    @property
    def writable(self) -> tuple[Path, ...]:
        """The folders the run may write (each mounted on its own; nothing else of the run folder is)."""
        return (self.workspace, self.workbench, self.run_dir, self.home, self.outbox)

    def ensure(self) -> "RunLayout":
        """Create the run's folders, 0700 (not the workspace: ``worktree.make_workspace`` makes that)."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        for d in (self.dir, self.workbench, self.run_dir, self.home, self.outbox, self.questions, self.mailbox,
                  self.mailbox / "answers", self.mailbox / "inbox"):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self

    def hand_over(self, uid: int, gid: int) -> None:
        """Give the run's uid what it writes (recursively) and what it must read (the mailbox: spec, env file).

        Only for a service running as root whose runs use another uid; the read-only mounts keep the run
        from changing what it merely owns."""
        for top in (*self.writable, self.mailbox):
            if not top.exists():
                continue
            os.chown(top, uid, gid, follow_symlinks=False)
            # relative to each folder's own fd, never through a path: a folder swapped for a symlink mid-walk (by
            # what a run left running) cannot point a chown anywhere else
            for _, dirnames, filenames, dirfd in os.fwalk(top):
                for name in dirnames + filenames:
                    os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)

    @classmethod
    def of_spec_file(cls, spec_file: str | Path, run_id: str, repo_name: str) -> "RunLayout":
        """The layout a spec file sits in (``<root>/<folder>/mailbox/spec.json``)."""
        path = Path(spec_file).expanduser().resolve()
        folder = path.parent.parent
        layout = cls(folder.parent, run_id, repo_name)
        if folder.name != run_id and valid_run_id(folder.name):  # a warm slot's folder
            layout = cls(folder.parent, run_id, repo_name, folder.name)
        if layout.spec_file != path:
            raise ValueError(f"{path} is not where run {run_id!r} keeps its spec ({layout.spec_file}): "
                             "a spec file must sit in its run's folder")
        return layout

"""Every error the sandbox layer raises, under one root: a caller catches ``SandboxError`` or one branch of it.

    SandboxError
    ├── BackendError            a backend could not do what it was asked (RuntimeError)
    │   ├── BackendUnavailable  its engine or API does not answer: the machine's fault, not the run's — a start
    │   │                       waits its turn again; the engine's own error is kept as ``__cause__``
    │   └── RunExists           the engine already has a sandbox for this run
    ├── SpecError               a run spec that is not one (ValueError)
    ├── WorktreeError           git could not make, read or take the run's work (RuntimeError)
    │   ├── DiffTooLarge        the diff is larger than the cap it was asked under
    │   ├── NotAGitRepo         (ValueError)
    │   └── BranchExists        (ValueError)
    ├── CheckpointError         the run's work could not be handed back (RuntimeError)
    ├── RunFileError            a run file that is not a plain, small, regular file where it should be (OSError)
    ├── RecordError             a run-written record that is not one (ValueError)
    ├── EnvFileError            an env file that cannot be written or read (ValueError)
    ├── DevContainerError       a repository's devcontainer.json that flower cannot honour (ValueError)
    ├── ImageError              the sandbox image cannot be built or found (RuntimeError)
    ├── EnvironmentRefused      the team's environment cannot be made as asked (ValueError)
    └── SetupFailed             a setup command of the team's environment failed (RuntimeError)

The builtin mixins stay (as ``flower.core.errors`` keeps them): code that caught ``ValueError`` or ``OSError``
before still does. Each backend maps its engine's errors into this tree inside itself — Docker's connection errors
and the Kubernetes API's URLError/OSError become ``BackendUnavailable`` — so the service never imports an engine's
client library to tell a dead engine from a failed run.
"""

from __future__ import annotations

__all__ = ["SandboxError", "BackendError", "BackendUnavailable", "RunExists", "SpecError", "WorktreeError",
           "DiffTooLarge", "NotAGitRepo", "BranchExists", "CheckpointError", "RunFileError", "RecordError", "EnvFileError",
           "DevContainerError", "ImageError", "EnvironmentRefused", "SetupFailed"]


class SandboxError(Exception):
    """The root of the sandbox layer's errors."""


class BackendError(SandboxError, RuntimeError):
    """A backend could not do what it was asked; the message says why and what to do."""


class BackendUnavailable(BackendError):
    """The backend's engine or API does not answer (its socket is gone, it refuses, it times out)."""


class RunExists(BackendError):
    """The engine already holds a sandbox for this run."""


class SpecError(SandboxError, ValueError):
    """A run spec that cannot run: the message says which field and what to do."""


class WorktreeError(SandboxError, RuntimeError):
    """A git operation that git refused, or a run's work that does not hold up; the message says why."""


class DiffTooLarge(WorktreeError):
    """The diff is larger than the cap it was asked under; nothing of it was sent."""


class NotAGitRepo(WorktreeError, ValueError):
    """The given path is not a git repository."""


class BranchExists(WorktreeError, ValueError):
    """The branch a new run should create already exists."""


class CheckpointError(SandboxError, RuntimeError):
    """git could not commit or bundle the run's work; the message carries git's reason."""


class RunFileError(SandboxError, OSError):
    """A run file that is not a plain, small, regular file where it should be (the message says what it is)."""


class RecordError(SandboxError, ValueError):
    """A run-written record that is not one: the message says which and why."""


class EnvFileError(SandboxError, ValueError):
    """A key or value that cannot go into an env file."""


class DevContainerError(SandboxError, ValueError):
    """A devcontainer.json (or a file it names) that does not parse, or asks what flower does not do.

    ``path`` is the file, repository-relative; ``sentence`` says what is wrong and what to do; ``line`` and
    ``column`` (1-based) point into the file when the JSON itself is at fault."""

    def __init__(self, path: str, sentence: str, *, line: int | None = None, column: int | None = None) -> None:
        self.path, self.sentence, self.line, self.column = path, sentence, line, column
        where = f"{path}:{line}:{column}" if line is not None else path
        super().__init__(f"{where}: {sentence}")


class ImageError(SandboxError, RuntimeError):
    """Building the base, the wheelhouse or the image failed; the message carries the tool's last words."""


class EnvironmentRefused(SandboxError, ValueError):
    """The team's environment cannot be made: an image the runtime cannot live in, a base image not on this machine,
    a setup that would carry a secret into the prepared image (the sentence says which and what to do)."""


class SetupFailed(SandboxError, RuntimeError):
    """A setup command of the team's environment failed; ``tail`` is the end of its output."""

    def __init__(self, message: str, *, tail: str = "", exit_code: int | None = None) -> None:
        super().__init__(message)
        self.tail = tail
        self.exit_code = exit_code

"""Where a run's process lives: ``LocalBackend`` (a subprocess), ``DockerBackend`` (a container),
``KubernetesBackend`` (a Job), ``MemoryBackend`` (nowhere: the seam's test double)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import STATES, Backend, BackendError, BackendUnavailable, Handle, Inspectable, State, WarmBackend
from .local import LocalBackend
from .memory import MemoryBackend

__all__ = ["Backend", "WarmBackend", "Inspectable", "Handle", "State", "BackendError", "BackendUnavailable", "STATES",
           "LocalBackend", "DockerBackend", "KubernetesBackend", "MemoryBackend"]

if TYPE_CHECKING:
    from .docker import DockerBackend
    from .kubernetes import KubernetesBackend
else:
    def __getattr__(name: str) -> Any:  # the docker SDK and GitPython only when the Docker backend is used
        if name == "DockerBackend":
            from .docker import DockerBackend

            return DockerBackend
        if name == "KubernetesBackend":
            from .kubernetes import KubernetesBackend

            return KubernetesBackend
        raise AttributeError(name)

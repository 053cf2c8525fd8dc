"""Where a run's process lives: ``LocalBackend`` (a subprocess), ``DockerBackend`` (a container), ``KubernetesBackend`` (a Job)."""

from __future__ import annotations

from typing import Any

from .base import STATES, Backend, BackendError
from .local import LocalBackend

__all__ = ["Backend", "BackendError", "STATES", "LocalBackend", "DockerBackend", "KubernetesBackend"]


def __getattr__(name: str) -> Any:  # the docker SDK and GitPython only when the Docker backend is used
    if name == "DockerBackend":
        from .docker import DockerBackend

        return DockerBackend
    if name == "KubernetesBackend":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend
    raise AttributeError(name)

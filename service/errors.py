"""Every error the service layer raises of its own, under one root (the sandbox's are ``sandbox.errors``).

    ServiceError
    ├── ServiceConfigError   the service's config cannot be used (ValueError): one sentence, what and where
    ├── TenantError          the tenants file cannot be used (ValueError)
    ├── TenantNotReady       a tenant's repository or credentials cannot serve a run now (ValueError)
    ├── RegistryDamaged      a registry file that is not ours, or not whole (RuntimeError)
    ├── RegistryNewer        the registry's schema is newer than this service's migrations (RuntimeError)
    ├── RegistryUnreachable  the registry's database does not answer (RuntimeError): host and database named
    ├── RegistryLocked       another process held the migration lock (or a restore the registry) past the wait
    ├── RegistryInUse        a restore found processes using the registry (RuntimeError): each named
    ├── UpstreamError        the tenant's model provider could not be reached or answered badly
    ├── GatewayNotServing    the model gateway's process did not take a starting run's token in time
    ├── LeaseLost            a write of a live run's found its lease held by another replica (or the run ended)
    ├── ReplicaNameTaken     another live process holds this replica's name (RuntimeError): set ``replica``
    ├── RunFolderGone        a run to be resumed has no checkout left to resume on (RuntimeError)
    └── PushFailed           a run's branch did not reach the tenant's git remote (no credential in the sentence)

``ServiceConfigError`` is the config's error by a name of its own: ``flower.ConfigError`` is the library's.
"""

from __future__ import annotations

__all__ = ["ServiceError", "ServiceConfigError", "TenantError", "TenantNotReady", "RegistryDamaged",
           "RegistryNewer", "RegistryUnreachable", "RegistryLocked", "RegistryInUse", "UpstreamError",
           "GatewayNotServing", "LeaseLost", "ReplicaNameTaken", "RunFolderGone", "PushFailed"]


class ServiceError(Exception):
    """The root of the service layer's own errors."""


class ServiceConfigError(ServiceError, ValueError):
    """The service's config is unusable; the message says what and where."""


class TenantError(ServiceError, ValueError):
    """The tenants file is unusable; the message says what to fix."""


class TenantNotReady(ServiceError, ValueError):
    """A tenant's repository or credentials cannot serve a run right now. The message is the operator's (paths and
    the fix, for the log); ``public`` what the tenant is shown (no path of the operator's, no fix of theirs)."""

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public if public is not None else message


class RegistryDamaged(ServiceError, RuntimeError):
    """The registry file is not one this service can trust or read whole; the message says how to get back."""


class RegistryNewer(ServiceError, RuntimeError):
    """A newer service migrated the registry: ``found`` is the schema it is at, ``known`` the newest this code
    has; ``where`` names the file or database. Nothing is changed in it."""

    def __init__(self, message: str, *, where: str, found: str, known: str) -> None:
        super().__init__(message)
        self.where, self.found, self.known = where, found, known


class RegistryUnreachable(ServiceError, RuntimeError):
    """The registry's database cannot be reached; ``host`` and ``database`` say which (no password, ever)."""

    def __init__(self, message: str, *, host: str, database: str) -> None:
        super().__init__(message)
        self.host, self.database = host, database


class RegistryLocked(ServiceError, RuntimeError):
    """Opening waited ``waited_s`` for another process's migration lock, or for a restore, and gave up."""

    def __init__(self, message: str, *, where: str, waited_s: float) -> None:
        super().__init__(message)
        self.where, self.waited_s = where, waited_s


class RegistryInUse(ServiceError, RuntimeError):
    """A restore found processes using the registry (``users``: each in words, with how to stop it)."""

    def __init__(self, message: str, *, where: str, users: list[str]) -> None:
        super().__init__(message)
        self.where, self.users = where, users


class UpstreamError(ServiceError):
    """The tenant's model provider could not be reached, or broke off its answer."""


class GatewayNotServing(ServiceError, RuntimeError):
    """The gateway's process did not serve run ``run_id``'s socket within ``waited_s``."""

    def __init__(self, message: str, *, run_id: str, waited_s: float) -> None:
        super().__init__(message)
        self.run_id, self.waited_s = run_id, waited_s


class LeaseLost(ServiceError, RuntimeError):
    """Run ``run_id`` is no longer this replica's to write: another took it over, or it ended meanwhile."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunFolderGone(ServiceError, RuntimeError):
    """Run ``run_id`` would be resumed on its folder, and its checkout is not there any more."""

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class ReplicaNameTaken(ServiceError, RuntimeError):
    """Another live process holds this replica's name (``service.control.leases``): ``name``, and ``expires_in_s``, when its
    heartbeat runs out unless renewed."""

    def __init__(self, message: str, *, name: str, expires_in_s: float) -> None:
        super().__init__(message)
        self.name, self.expires_in_s = name, expires_in_s


class PushFailed(ServiceError):
    """Why a push did not happen, in one sentence without the credential."""

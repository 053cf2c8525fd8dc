"""Every error the service layer raises of its own, under one root (the sandbox's are ``sandbox.errors``).

    ServiceError
    ├── ServiceConfigError   the service's config cannot be used (ValueError): one sentence, what and where
    ├── TenantError          the tenants file cannot be used (ValueError)
    ├── TenantNotReady       a tenant's repository or credentials cannot serve a run now (ValueError)
    ├── RegistryDamaged      a registry file that is not ours, or not whole (RuntimeError)
    ├── UpstreamError        the tenant's model provider could not be reached or answered badly
    └── PushFailed           a run's branch did not reach the tenant's git remote (no credential in the sentence)

``ServiceConfigError`` is the config's error by a name of its own: ``flower.ConfigError`` is the library's.
"""

from __future__ import annotations

__all__ = ["ServiceError", "ServiceConfigError", "TenantError", "TenantNotReady", "RegistryDamaged",
           "UpstreamError", "PushFailed"]


class ServiceError(Exception):
    """The root of the service layer's own errors."""


class ServiceConfigError(ServiceError, ValueError):
    """The service's config is unusable; the message says what and where."""


class TenantError(ServiceError, ValueError):
    """The tenants file is unusable; the message says what to fix."""


class TenantNotReady(ServiceError, ValueError):
    """A tenant's repository or credentials cannot serve a run right now (one sentence, safe to show them)."""


class RegistryDamaged(ServiceError, RuntimeError):
    """The registry file is not one this service can trust or read whole; the message says how to get back."""


class UpstreamError(ServiceError):
    """The tenant's model provider could not be reached, or broke off its answer."""


class PushFailed(ServiceError):
    """Why a push did not happen, in one sentence without the credential."""

"""A run's environment: the team's (its image, its devcontainer.json, its setup) prepared before its sandbox starts.

The recipe is read from the tenant's repository at the run's base — never from the run's checkout, which the run
may have changed by a resume — and prepared by ``sandbox.prepare`` (reused when its key is known) on the backend's
Docker engine (``client``): the Docker backend's own, or Kubernetes' with a registry to push to. Asking another
for one fails the run with a sentence saying so.
"""

from __future__ import annotations

import tempfile
import threading
from functools import partial
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox.backends.base import Backend
from sandbox.devcontainer import is_lockfile
from sandbox.environment import recipe_of
from sandbox.errors import DevContainerError, EnvironmentRefused
from sandbox.prepare import EgressOpener, prepare, prune, stop_setups
from sandbox.spec import Prepared
from sandbox.worktree import export_tree, has_any, top_level

from ..config import ServiceConfig
from ..egress.proxy import EgressProxy
from ..operator_files import operator_file
from ..logging import get_logger
from ..tenants import Tenant, TenantNotReady

__all__ = ["Environments", "DEVCONTAINER_PATHS"]

log = get_logger("flower.service.environments")
DEVCONTAINER_PATHS = (".devcontainer/devcontainer.json", ".devcontainer.json", ".devcontainer")


class Environments:
    def __init__(self, config: ServiceConfig, backend: Backend) -> None:
        self.config = config
        self.backend = backend
        self._proxy: EgressProxy | None = None
        self._lock = threading.Lock()
        self.latest: dict[str, Prepared] = {}
        """Each tenant's environment as last prepared: the warm pool keeps sandboxes of it."""
        self.preparing: dict[str, str] = {}
        """``run id → the last thing its preparation said``, while a run's start waits for it (its ``waiting``)."""

    def egress(self, tenant: Tenant) -> EgressOpener | None:
        """The tenant's allow-list for its setup: a squid of the control plane's own (started with the first setup
        that needs it), audited like a run's — setup reaches what the runs may, no more."""
        if tenant.egress != "proxied" or not tenant.egress_allow:
            return None
        with self._lock:
            if self._proxy is None:
                self._proxy = EgressProxy.of(self.config, "setup")
            proxy = self._proxy

        @contextmanager
        def opened(key: str, folder: Path) -> Iterator[None]:
            proxy.open(key, tenant.name, tenant.egress_allow, folder)
            try:
                yield
            finally:
                proxy.close(key)

        return opened

    def close(self) -> None:
        """The service stops: its setups end (their runs go back in line at the next start), then their squid."""
        client = getattr(self.backend, "client", None)
        if client is not None:
            try:
                stop_setups(client)
            except Exception as e:  # noqa: BLE001 - an engine away: nothing of ours runs there to end
                log.warning("environment.setups_not_ended", error=str(e))
        if self._proxy is not None:
            self._proxy.shutdown()

    def wanted(self, tenant: Tenant, repo: str) -> bool:
        """Whether a run of ``tenant`` may need its own environment (then no warm sandbox of flower's image fits
        it, and its start may take a setup's minutes)."""
        if tenant.image is not None or tenant.setup:
            return True
        if not tenant.devcontainer:
            return False
        return has_any(repo, "HEAD", DEVCONTAINER_PATHS)

    def of(self, tenant: Tenant, repo: str, base: str, run_id: str | None = None) -> Prepared | None:
        """Blocking: the prepared environment of a run of ``tenant`` from ``base``, or None for flower's own image.
        EnvironmentRefused, DevContainerError or SetupFailed say what stops it. While it works for ``run_id``, what
        it last said is in ``preparing``."""
        def said(text: str) -> None:
            log.info("environment.prepare", tenant=tenant.name, run=run_id, said=text[-4000:])
            if run_id is not None:
                self.preparing[run_id] = text[-300:]

        try:
            return self._of(tenant, repo, base, said)
        finally:
            if run_id is not None:
                self.preparing.pop(run_id, None)

    def _of(self, tenant: Tenant, repo: str, base: str, said: Callable[[str], None]) -> Prepared | None:
        with tempfile.TemporaryDirectory(prefix="flower-tree-") as tmp:
            tree = Path(tmp) / Path(repo).name
            tree.mkdir()
            whole = partial(export_tree, repo, base, tree)
            # the recipe's inputs: the root's lockfiles and the devcontainer files (never the whole root: a
            # repository may hold thousands of files there, past what one git command line takes)
            light = [name for name, kind in top_level(repo, base).items()
                     if name in DEVCONTAINER_PATHS or (kind == "blob" and is_lockfile(name))]
            try:  # the recipe's inputs alone first: a kept environment needs no more of a large repository
                if light:
                    export_tree(repo, base, tree, light)
                recipe = recipe_of(tree, image=tenant.image, setup=tenant.setup, devcontainer=tenant.devcontainer)
            except DevContainerError:  # its Dockerfile elsewhere in the repository, or a real fault: it says
                whole()
                recipe = recipe_of(tree, image=tenant.image, setup=tenant.setup, devcontainer=tenant.devcontainer)
            if recipe is None:
                return None
            client = getattr(self.backend, "client", None)
            sandbox_image = getattr(self.backend, "image", None)
            if client is None or not sandbox_image:
                raise EnvironmentRefused(f"tenant {tenant.name} asks for its own environment (an image, setup or the "
                                         f"repository's devcontainer.json), which the docker backend runs, and "
                                         f"kubernetes once `environment_registry` names where to push it; this "
                                         f"service uses {self.config.backend}")
            secrets = {}
            if tenant.setup_secrets_file:
                secrets = operator_file(Path(tenant.setup_secrets_file),
                                        f"the setup secrets file of tenant {tenant.name}", TenantNotReady)
            network = (self.config.network_mode or "bridge") if tenant.egress == "open" else "none"
            prepared = prepare(recipe, tree, tenant=tenant.name, sandbox_image=sandbox_image, client=client,
                               secrets=secrets, egress=self.egress(tenant), timeout_s=self.config.setup_timeout_s,
                               log=said, fill=whole, network_mode=network)
        prune(int(self.config.environment_cache_gb * 1e9), client)
        self.latest[tenant.name] = prepared
        return prepared

"""The API's side of ``gateway_process = "beside"``: a gateway process is serving this data dir, whoever started it.

At start, and every ``CHECK_S`` after, the keeper looks: its own child alive, or the gateway's lock held by another
process (a gateway left running by an API that was killed, or started by the operator), is a gateway serving.
Otherwise it starts ``python -m service gateway --config -`` (this process's config, as it resolved it, on the
child's stdin: the same config whether it came from a file, the environment or ``create_app``'s caller, and no
copy of it on disk) in a session of its own (``start_new_session``), so that a
SIGKILL of the API's process group does not take the data plane with it — and a gateway that died is back within
about a second. The API's graceful stop leaves the gateway running too: the runs keep their model calls while the
control plane is away, and the next API finds it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Sequence

import msgspec

from ..config import ServiceConfig
from ..logging import get_logger
from .daemon import lock_held, lock_path

__all__ = ["GatewayKeeper", "CHECK_S"]

CHECK_S = 0.25
RETRY_CAP_S = 30.0  # a gateway that keeps failing at its start is started again at most this rarely

log = get_logger("flower.service")


class GatewayKeeper:
    def __init__(self, config: ServiceConfig, command: Sequence[str] | None = None) -> None:
        self.config = config
        self.command = [*(command or [sys.executable, "-m", "service", "gateway", "--config", "-"]),
                        "--parent", str(os.getpid())]
        """How the gateway is started (the API's own config options, so it reads the same config); ``--parent``:
        it ends by itself once this process is gone and no run is active (no gateway left behind for nothing)."""
        self._child: subprocess.Popen[bytes] | None = None
        self._task: asyncio.Task[None] | None = None
        self.started = 0
        """Gateway processes this keeper started."""
        self._failures = 0  # starts in a row whose process exited with an error
        self._not_before = 0.0  # monotonic: the next start waits for this (backing off a failing one)

    def ensure(self) -> None:
        """A gateway serves, or one is started now."""
        if self._child is not None:
            if self._child.poll() is None:
                return
            status = self._child.returncode
            self._failures = self._failures + 1 if status else 0
            self._not_before = time.monotonic() + min(RETRY_CAP_S, CHECK_S * 2 ** self._failures) \
                if self._failures > 1 else 0.0
            log.warning("gateway.exited", pid=self._child.pid, status=status, failures=self._failures)
            self._child = None
        if time.monotonic() < self._not_before or lock_held(lock_path(self.config)):
            return
        self._child = subprocess.Popen(self.command, stdin=subprocess.PIPE, start_new_session=True, close_fds=True)
        assert self._child.stdin is not None
        with self._child.stdin:
            self._child.stdin.write(msgspec.json.encode(self.config))
        self.started += 1
        log.info("gateway.started", pid=self._child.pid, command=" ".join(self.command[1:]))

    async def start(self) -> None:
        self.ensure()
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="flower-gateway-keeper")

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_S)
            try:
                await asyncio.to_thread(self.ensure)
            except OSError as e:  # no process could be started now (out of pids, memory): the next look tries
                log.error("gateway.start_failed", error=str(e)[:300])

    async def stop(self) -> None:
        """Stop watching; the gateway keeps serving the runs (the next API finds it)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._child is not None and self._child.poll() is not None:
            self._child = None

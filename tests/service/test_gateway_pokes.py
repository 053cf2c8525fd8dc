"""The gateway's process (``service.gateway.daemon``) reads the runs' grants every ``SYNC_S`` — and at once when a
service pokes it (``service.gateway.metering.poke``), so a starting run's socket, and an ending one's close, wait for no
pass. Here its passes come once a minute: only a poke can be why the socket is served within seconds."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import service.gateway.daemon as gatewayd
from service.config import ServiceConfig
from service.gateway import new_token
from service.gateway.daemon import GatewayProcess
from service.gateway.metering import poke, serving
from service.control.live import layout_of
from service.registry import Registry
from service.tenants import Tenants

from test_scheduler import tenants_file

pytestmark = pytest.mark.asyncio


async def _until(what: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(what):
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_poked_gateway_opens_a_starting_runs_socket_and_closes_an_ending_ones_without_waiting_for_a_pass(
        tmp_path: Path, git_repo: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gatewayd, "SYNC_S", 60.0)
    repo = git_repo(tmp_path / "repos" / "acme")
    creds = tmp_path / "acme.env"
    creds.write_text("ANTHROPIC_API_KEY=sk-test-not-used\n")
    config = ServiceConfig(data_dir=str(tmp_path / "data"), backend="local", min_free_mb=0, guard_canary=False,
                           tenants=str(tenants_file(tmp_path, repo, creds)))
    config.runs_root.mkdir(parents=True)
    registry = Registry(config.db_path)
    process = GatewayProcess(config, registry, Tenants(config.tenants))
    stop = asyncio.Event()
    pokes = process.listen_for_pokes(asyncio.get_running_loop())
    assert pokes is not None
    passes = asyncio.create_task(process.run(stop))
    try:
        await asyncio.sleep(0.5)  # its first pass has found nothing to serve; the next is a minute away
        run_id = f"20261204-000000-{secrets.token_hex(16)}"
        registry.runs.create(id=run_id, tenant="acme", ask="做一个 hello", options={}, repo=str(repo))
        assert registry.runs.transition(run_id, "running", frm=["queued"])
        row = registry.runs.record_token(run_id, new_token()[1])
        assert row is not None
        layout = layout_of(config.runs_root, row).ensure()
        layout.gateway.mkdir(exist_ok=True)
        assert not serving(layout.gateway)

        poke(config.data_path)
        assert await _until(lambda: serving(layout.gateway)), "the poke did not bring a pass"

        registry.runs.record_token(run_id, None)
        poke(config.data_path)
        assert await _until(lambda: not serving(layout.gateway)), "the ended run's socket is still served"
    finally:
        stop.set()
        await asyncio.wait_for(passes, 10)
        pokes.close()
        await process.gateway.aclose()
        registry.close()

"""The verify command from the tenants file and the ask into the run's spec: the real Scheduler, registry, tenants
file and git worktrees, ``MemoryBackend`` at the seam (what the sandbox does with it: tests/docker/test_verify_docker.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.spec import RunSpec
from sandbox.testing import MemoryRun
from service.control.admission import BadSubmit
from service.errors import TenantError
from service.tenants import Tenants
from test_scheduler import World, make_world, tenants_file  # noqa: F401 - the fixture


SPECS: dict[str, RunSpec] = {}  # run id → the spec its sandbox was started with


def _ends(run: MemoryRun) -> None:
    assert run.spec is not None
    SPECS[run.spec.run_id] = run.spec
    run.event("verify", "verify `true` exited 0", payload={"cmd": "true", "exit_code": 0, "passed": True})
    run.exit("succeeded")


async def _spec_of(w: World, options: dict[str, object]) -> tuple[str | None, float]:
    tenant = w.service.tenants.get("acme")
    assert tenant is not None
    admitted = await w.service.admission.submit(tenant, "修好 calc", options)
    queue = w.service.feed.subscribe(admitted.run.id)
    row = await w.until(admitted.run.id, "succeeded")
    assert row.options == options, "the ask's options are kept as it gave them"
    told = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [ev.payload["exit_code"] for _, ev in told[:-1] if ev.kind == "verify"] == [0], "the check is in the stream"
    spec = SPECS.pop(row.id)
    return spec.verify, spec.verify_timeout_s


async def test_the_tenants_check_reaches_the_spec_and_the_asks_own_wins(make_world: Callable[..., World]) -> None:
    w = await make_world(_ends, tenant={"verify": "pytest -q", "verify_timeout_s": 90,
                                        "allowed_options": ["verify", "rounds"]})
    assert await _spec_of(w, {}) == ("pytest -q", 90.0)
    assert await _spec_of(w, {"verify": "npm test", "rounds": 2}) == ("npm test", 90.0)


async def test_an_ask_may_set_verify_only_where_the_tenant_allows_it(make_world: Callable[..., World]) -> None:
    w = await make_world(_ends, tenant={"allowed_options": ["rounds"]})
    tenant = w.service.tenants.get("acme")
    assert tenant is not None and tenant.verify is None
    with pytest.raises(BadSubmit, match=r"option\(s\) verify are not allowed for tenant acme"):
        await w.service.admission.submit(tenant, "修好 calc", {"verify": "make check"})
    assert await _spec_of(w, {}) == (None, 600.0), "no check anywhere: the judge judges alone"


def test_a_bad_verify_in_the_tenants_file_is_refused_with_a_sentence(tmp_path: Path, git_repo) -> None:
    repo, creds = git_repo(tmp_path / "acme"), tmp_path / "acme.env"
    creds.write_text("ANTHROPIC_API_KEY=sk-test\n")
    with pytest.raises(TenantError, match=r"`verify` of tenant acme in .*: verify must be a shell command"):
        Tenants(tenants_file(tmp_path, repo, creds, verify="   "))
    with pytest.raises(TenantError, match="verify_timeout_s"):
        Tenants(tenants_file(tmp_path, repo, creds, verify="make check", verify_timeout_s=0))

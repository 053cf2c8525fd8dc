"""``Admission``: the submit rules without HTTP — the real registry, tenants file, repository and disk check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from service.control.admission import Admission, BadSubmit, DiskLow, NotTakingRuns, QueueFull
from service.config import ServiceConfig
from service.errors import TenantNotReady
from service.control.health import Health
from service.registry import Registry
from service.tenants import Tenant, Tenants

pytestmark = pytest.mark.asyncio


def admission(tmp_path: Path, git_repo: Callable[..., Path], *, refusal: str | None = None,
              min_free_mb: float = 0, repo: Path | None = None, tenant_extra: str = "",
              max_queued: int = 500) -> tuple[Admission, Tenant, Registry, list[int]]:
    repo = repo or git_repo(tmp_path / "repos" / "acme")
    creds = tmp_path / "acme.env"
    creds.write_text("ANTHROPIC_API_KEY=sk-test-not-used\n")
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[[tenant]]\nname = "acme"\ntoken = "acme-token-0123456789"\nrepo = "{repo}"\n'
                       f'credentials = "{creds}"\nallowed_options = ["rounds"]\n{tenant_extra}')
    cfg = ServiceConfig(data_dir=str(tmp_path / "data"), backend="local", min_free_mb=min_free_mb,
                        guard_canary=False, tenants=str(tenants), max_queued_per_tenant=max_queued)
    cfg.data_path.mkdir(parents=True, exist_ok=True)
    registry = Registry(cfg.db_path)
    woken: list[int] = []
    tenant = Tenants(cfg.tenants).get("acme")
    assert tenant is not None
    return (Admission(cfg, registry.runs, Health(cfg.data_path, cfg.min_free_mb, cfg.backend),
                      refusal=lambda: refusal, wake=lambda: woken.append(1)), tenant, registry, woken)


async def test_an_admitted_ask_is_one_queued_row_and_wakes_the_scheduler(
        tmp_path: Path, git_repo: Callable[..., Path]) -> None:
    a, tenant, registry, woken = admission(tmp_path, git_repo)
    admitted = await a.submit(tenant, "  做一个 hello  ", {"rounds": 2})
    row = registry.runs.get(admitted.run.id)
    assert row is not None and (row.status, row.ask, row.options) == ("queued", "做一个 hello", {"rounds": 2})
    assert admitted.branch == f"flower/{row.id}" and woken == [1]


@pytest.mark.parametrize("ask, options, error, says", [
    ("   ", {}, BadSubmit, "`ask` is blank"),
    ("do it", {"model": "x"}, BadSubmit, "option(s) model are not allowed for tenant acme"),
    ("do it", {"rounds": "many"}, BadSubmit, "invalid options"),
])
async def test_a_bad_ask_or_option_queues_nothing(tmp_path: Path, git_repo: Callable[..., Path], ask: str,
                                                  options: dict[str, object], error: type[Exception],
                                                  says: str) -> None:
    a, tenant, registry, woken = admission(tmp_path, git_repo)
    with pytest.raises(error, match=says.replace("(", r"\(").replace(")", r"\)")):
        await a.submit(tenant, ask, options)
    assert registry.runs.list() == [] and woken == []


async def test_a_refusing_service_queues_nothing(tmp_path: Path, git_repo: Callable[..., Path]) -> None:
    a, tenant, registry, _ = admission(tmp_path, git_repo, refusal="the Bash guard let `rm -rf /` through")
    with pytest.raises(NotTakingRuns, match="Bash guard"):
        await a.submit(tenant, "do it", {})
    assert registry.runs.list() == []


async def test_a_tenant_whose_repository_is_not_ready_queues_nothing(tmp_path: Path,
                                                                     git_repo: Callable[..., Path]) -> None:
    empty = tmp_path / "not-a-repo"
    empty.mkdir()
    a, tenant, registry, _ = admission(tmp_path, git_repo, repo=empty)
    with pytest.raises(TenantNotReady):
        await a.submit(tenant, "do it", {})
    assert registry.runs.list() == []


async def test_a_disk_below_its_floor_queues_nothing(tmp_path: Path, git_repo: Callable[..., Path]) -> None:
    a, tenant, registry, _ = admission(tmp_path, git_repo, min_free_mb=1e12)  # more than any disk has free
    with pytest.raises(DiskLow, match="low on disk space"):
        await a.submit(tenant, "do it", {})
    assert registry.runs.list() == []


@pytest.mark.parametrize("tenant_extra, max_queued", [("", 3), ("max_queued = 3\n", 100)],
                         ids=["the service's cap", "the tenant's own"])
async def test_a_tenant_at_its_cap_of_queued_runs_queues_nothing_more(
        tmp_path: Path, git_repo: Callable[..., Path], tenant_extra: str, max_queued: int) -> None:
    a, tenant, registry, woken = admission(tmp_path, git_repo, tenant_extra=tenant_extra, max_queued=max_queued)
    for i in range(3):
        await a.submit(tenant, f"ask {i}", {})
    with pytest.raises(QueueFull, match="tenant acme already has 3 runs waiting to start"):
        await a.submit(tenant, "one more", {})
    assert len(registry.runs.list()) == 3 and woken == [1, 1, 1]
    registry.runs.begin(registry.runs.list(oldest_first=True)[0].id, started=1.0)  # one started: room for one more
    await a.submit(tenant, "one more", {})

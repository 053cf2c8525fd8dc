"""``Retention`` on the clock it is handed: an ended run's files go once it ended more than ``retain_days`` ago,
not a second sooner — shown on a ``ManualClock`` set a second before that moment on a day no test runs on, moved
on two seconds (no sleeping), with a real registry on a SQLite file and the run's real folder."""

from __future__ import annotations

from pathlib import Path

from service.clock import ManualClock
from service.config import ServiceConfig
from service.control.harvest import Harvest
from service.control.live import layout_of
from service.registry import Registry
from service.control.retention import Retention

RUN = "20310101-000000-" + "d" * 32
ENDED = 1924992000.0  # 2031-01-01 00:00:00 UTC
DAY = 86400


async def test_an_ended_runs_files_go_once_it_ended_more_than_retain_days_ago_on_the_retention_clock(
        tmp_path: Path) -> None:
    config = ServiceConfig(data_dir=str(tmp_path / "data"), tenants=str(tmp_path / "tenants.toml"), retain_days=2)
    registry = Registry(tmp_path / "registry.sqlite3")
    registry.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo=str(tmp_path / "repos" / "acme"))
    registry.runs.begin(RUN, started=ENDED - 60)
    ended = registry.runs.finish(RUN, "succeeded", ended=ENDED)
    assert ended is not None
    folder = layout_of(config.runs_root, ended).dir
    (folder / "outbox").mkdir(parents=True)
    (folder / "outbox" / "events.jsonl").write_text("{}\n")
    clock = ManualClock(ENDED + 2 * DAY - 1)
    retention = Retention(config, registry.runs, Harvest(config, registry.runs), is_live=lambda run_id: False,
                          clock=clock)

    assert await retention.sweep() == [] and folder.exists(), "ended 2 days ago less a second: kept"
    clock.advance(2)
    assert await retention.sweep() == [RUN] and not folder.exists()
    row = registry.runs.get(RUN)
    assert row is not None and row.deleted == ENDED + 2 * DAY + 1, "deleted at the retention clock's time"
    registry.close()

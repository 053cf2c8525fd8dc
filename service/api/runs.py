"""/v1/runs: submit, list, read, cancel and delete runs; a run's diff (streamed, capped), its files and manifest."""

from __future__ import annotations

import asyncio
import datetime
import re
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from litestar import Controller, Response, delete, get, post
from litestar.di import Provide
from litestar.exceptions import NotFoundException, ServiceUnavailableException, ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter
from litestar.response import Stream

from ..config import ServiceConfig
from ..control.admission import BadSubmit, DiskLow, NotTakingRuns, QueueFull, new_run_id
from ..gateway.budgets import day_of
from ..logging import get_logger
from ..registry import STATUSES, Run
from ..registry.short_ids import short_of
from ..tenants import Tenant, TenantNotReady
from ..wiring import RunControl
from .deps import (AdmissionDep, ClockDep, ConfigDep, ControlDep, EnvironmentsDep, GateDep, HealthDep, RunDep,
                   RunsDep, SchedulesDep, SpendDep, TenantDep, provide_run)
from .errors import Conflict, Gone, InsufficientStorage, TooManyRequests, Unprocessable, errors, example_error
from .examples import DIFF, FILES, MANIFEST, RUN, RUNS, SUBMITTED, USAGE, SubmitBody, ok
from .schemas import (Budget, DiffFile, DiffFilesOut, ErrorOut, ManifestOut, RunList, RunOut, SubmitOut, UsageOut,
                      run_out)
from .waiting import waiting_of

if TYPE_CHECKING:
    from sandbox.worktree import Changes

__all__ = ["RunController", "new_run_id", "usage"]

log = get_logger("flower.service.api")


def _gone(run: RunDep, what: str) -> None:
    if run.deleted is not None:
        raise Gone(f"run {run.id} was deleted, and its {what} with it")


async def _changes(run: Run, tenant: Tenant, control: RunControl) -> tuple[str, Changes]:
    """The run's branch and what it changed (``git diff --numstat``): 409 before it started, 404 (410 once
    deleted) when its branch or base is gone."""
    from sandbox.worktree import diff_files

    if not run.base:
        raise Conflict(f"run {run.id} never started ({run.status}), so it has no diff")
    branch = control.layout(run).branch
    try:
        return branch, await asyncio.to_thread(diff_files, run.repo, branch, base=run.base)
    except Exception as e:  # noqa: BLE001
        _gone(run, "branch")
        log.warning("run.diff_failed", tenant=tenant.name, run=run.id, error=str(e)[:300])
        raise NotFoundException(f"the diff of run {run.id} cannot be read: branch {branch} "
                                "or its base is gone from the repository") from None


_TOO_LARGE = ("the diff of run 20250612-093015-3f9c2a7e5b1d4c6a8e0f1b2c3d4e5f60 is larger than the service's "
              "max_diff_mb (20 MB), so it is not sent: fetch the branch into a clone of your repository (git fetch "
              "<your repository> flower/20250612-093015-3f9c2a7e5b1d4c6a8e0f1b2c3d4e5f60) and diff it there or ask "
              "for one file at a time (?path=, from GET …/diff/files)")


class RunController(Controller):
    path = "/runs"
    tags = ["runs"]
    dependencies = {"run": Provide(provide_run, sync_to_thread=False)}

    @post("/", status_code=201, operation_id="create_run", summary="Submit an ask; the run is queued",
          responses={**ok(201, SUBMITTED, "queued: `id` names the run, `branch` is where its work will be"),
                     **errors(400, 413, 422, 503, 507)})
    async def submit(self, tenant: TenantDep, admission: AdmissionDep, data: SubmitBody) -> Response[SubmitOut]:
        """The ask is queued as a new run of the caller's tenant (`Location` names it); it starts when a slot
        is free. `options` may set only what the tenant's `allowed_options` list; nothing is queued on a 4xx or
        5xx."""
        try:
            admitted = await admission.submit(tenant, data.ask, data.options)
        except NotTakingRuns as e:
            raise ServiceUnavailableException(str(e)) from None
        except BadSubmit as e:
            raise ValidationException(str(e)) from None
        except TenantNotReady as e:  # the operator's sentence to the log; the tenant is told whom to ask
            log.warning("tenant.not_ready", tenant=tenant.name, error=str(e))
            raise Unprocessable(f"{e.public}: ask the operator of this service to fix it (the service's log says "
                                "what and how)") from None
        except DiskLow as e:
            raise InsufficientStorage(str(e), headers={"Retry-After": "60"}) from None
        except QueueFull as e:
            raise TooManyRequests(str(e), headers={"Retry-After": "30"}) from None
        run = admitted.run
        return Response(SubmitOut(id=run.id, short=short_of(run.id), status=run.status, branch=admitted.branch),
                        status_code=201, headers={"Location": f"/v1/runs/{run.id}"})

    @get("/", operation_id="list_runs", summary="The tenant's runs, newest first",
         responses={**ok(200, RUNS, "the runs, newest first"), **errors(400)})
    async def list_runs(self, tenant: TenantDep, runs: RunsDep, schedules: SchedulesDep, config: ConfigDep,
                        status: Annotated[str | None, Parameter(
                            description="comma-separated statuses to keep, e.g. `running,queued`")] = None,
                        limit: Annotated[int, Parameter(ge=1, le=1000)] = 100,
                        deleted: Annotated[bool, Parameter(description="include deleted runs (tombstones)")] = True,
                        ) -> RunList:
        """Only the caller's own runs, filtered by status; deleted runs stay listed as tombstones unless
        `deleted=false`."""
        statuses = None
        if status:
            statuses = [s.strip() for s in status.split(",") if s.strip()]
            bad = [s for s in statuses if s not in STATUSES]
            if bad:
                raise ValidationException(f"unknown status {', '.join(bad)} (known: {', '.join(STATUSES)})")
        found = runs.list(tenant=tenant.name, statuses=statuses, limit=limit, deleted=None if deleted else False)
        fired = schedules.table.fired_of([r.id for r in found])
        return RunList(runs=[run_out(r, fired.get(r.id), config=config) for r in found])

    @get("/{run_id:str}", operation_id="get_run", summary="One run",
         responses={**ok(200, RUN, "the run as it is now"), **errors(404)})
    async def get_run(self, run: RunDep, tenant: TenantDep, runs: RunsDep, config: ConfigDep, gate: GateDep,
                      health: HealthDep, clock: ClockDep, schedules: SchedulesDep,
                      environments: EnvironmentsDep) -> RunOut:
        """Its status, times, cost, last step and, once it ended, its diffstat; a live run's counters move on
        between two reads. A queued one says why it waits (`waiting`), and so does a starting one while its team's
        environment is prepared; `fired_by`: the schedule or trigger that started it (null: it was submitted);
        `trace_id`: its trace in the operator's tracing backend (null: traces are off)."""
        return run_out(run, schedules.table.fired(run.id), config=config,
                       waiting=waiting_of(run, tenant, runs, config, gate, health, clock.now(),
                                          environments.preparing.get(run.id)))

    @delete("/{run_id:str}", status_code=200, operation_id="delete_run",
            summary="Delete an ended run's files (and, with branch=true, its branch); the row stays as a tombstone",
            responses={**ok(200, RUN, "the run's tombstone: `deleted` says when"), **errors(400, 404, 409)})
    async def delete_run(self, run: RunDep, tenant: TenantDep, control: ControlDep, config: ConfigDep,
                         branch: Annotated[bool, Parameter(
                             description="also delete the branch flower/<run> from the tenant's repository")] = False,
                         ) -> RunOut:
        """Only an ended run (cancel a live one first). Its events, manifest and sandbox folder go; its branch
        stays in the tenant's repository unless `branch=true`."""
        if not run.terminal:
            raise Conflict(f"run {run.id} is {run.status}: only an ended run can be deleted (cancel it first)")
        done = await control.delete(run, branch=branch)
        log.info("run.deleted", tenant=tenant.name, run=run.id, branch=branch)
        return run_out(done, config=config)

    @post("/{run_id:str}/cancel", status_code=200, operation_id="cancel_run",
          summary="Cancel: a queued run at once, a running one is stopped",
          responses={**ok(200, msgspec.structs.replace(RUN, status="cancelled"), "the run, ended"),
                     **ok(202, msgspec.structs.replace(RUN, status="running", cancel_requested=True),
                          "asked to stop; not ended within `wait`"),
                     **errors(400, 404, 409)})
    async def cancel(self, run: RunDep, tenant: TenantDep, runs: RunsDep, control: ControlDep,
                     config: ConfigDep, clock: ClockDep,
                     wait: Annotated[float, Parameter(ge=0, le=120,
                                                      description="seconds to wait for the run to end")] = 30.0,
                     ) -> Response[RunOut]:
        """Queued: cancelled at once. Running: stopped; waits up to ``wait`` seconds for it to end (else 202)."""
        if run.terminal:
            raise Conflict(f"run {run.id} has already ended ({run.status})")
        control.request_cancel(run.id)
        log.info("run.cancel_requested", tenant=tenant.name, run=run.id)
        deadline = clock.monotonic() + wait
        while True:
            current = runs.get(run.id)
            assert current is not None
            if current.terminal or clock.monotonic() >= deadline:
                break
            await asyncio.sleep(min(0.05, config.poll_s))
        return Response(run_out(current, config=config),
                        status_code=200 if current.terminal else 202)

    @get("/{run_id:str}/diff", media_type="text/x-diff", operation_id="get_run_diff",
         summary="git diff of the run's branch against its base",
         responses={**ok(200, DIFF, "the whole diff (or the one file's), streamed", media_type="text/x-diff"),
                    **errors(404, 409, 410), 422: ResponseSpec(ErrorOut, generate_examples=False, description=(
             "the diff (or the one file's) is larger than the service's `max_diff_mb`: nothing of it was sent; "
             "the error says how to fetch the branch instead"), examples=[example_error(422, _TOO_LARGE)])})
    async def diff(self, run: RunDep, tenant: TenantDep, control: ControlDep, config: ConfigDep,
                   path: Annotated[str | None, Parameter(
                       max_length=4096, description="only this file's diff: a `path` as GET …/diff/files lists it"
                   )] = None) -> Stream:
        """From the tenant's repository only: while the run is live, that is its last checkpoint (the runner
        hands its work back after every step). The diff is measured against `max_diff_mb` before its first
        byte is sent: a 200 is the whole diff, streamed (`X-Flower-Commit` names the commit it is of); a diff
        over the cap is a 422 and nothing else. Only if git fails after the first byte does the body end with
        a line starting `flower-diff-error: `. For a large diff, list its files (…/diff/files) and fetch them
        one at a time with `?path=`."""
        from sandbox.worktree import DiffTooLarge, diff_stream

        if path is not None and path.startswith("-"):
            raise ValidationException(f"path {path[:100]!r} starts with '-': give a path as GET /v1/runs/{run.id}"
                                      "/diff/files lists it")
        branch, changes = await _changes(run, tenant, control)
        name = None
        if path is not None:
            found = changes.find(path)
            if found is None:
                more = f" (the list stops after {len(changes.files)} files: fetch the branch for the rest)" \
                    if changes.truncated else ""
                raise NotFoundException(f"run {run.id} changed no file {path[:200]!r}: GET /v1/runs/{run.id}"
                                        f"/diff/files lists the files it changed{more}")
            name = found.name
        cap = config.max_diff_mb
        try:
            chunks = await diff_stream(run.repo, changes, cap=cap * 1024 * 1024, name=name)
        except DiffTooLarge:
            what = f"the diff of {path!r} in run {run.id}" if path is not None else f"the diff of run {run.id}"
            one = "" if path is not None else " or ask for one file at a time (?path=, from GET …/diff/files)"
            raise Unprocessable(f"{what} is larger than the service's max_diff_mb ({cap} MB), so it is not sent: "
                                f"fetch the branch into a clone of your repository (git fetch <your repository> "
                                f"{branch}) and diff it there{one}") from None
        except Exception as e:  # noqa: BLE001
            log.warning("run.diff_failed", tenant=tenant.name, run=run.id, error=str(e)[:300])
            raise NotFoundException(f"the diff of run {run.id} cannot be read: git failed on branch {branch}") \
                from None
        return Stream(chunks, media_type="text/x-diff",
                      headers={"X-Flower-Branch": branch, "X-Flower-Base": run.base or "",
                               "X-Flower-Commit": changes.commit, "X-Flower-Status": run.status})

    @get("/{run_id:str}/diff/files", operation_id="list_run_files",
         summary="The files the run changed, with lines added and deleted (git diff --numstat)",
         responses={**ok(200, FILES, "the changed files, as of `commit`"), **errors(404, 409, 410)})
    async def diff_files(self, run: RunDep, tenant: TenantDep, control: ControlDep) -> DiffFilesOut:
        """Cheap however large the diff: git counts, the service reads only the counts. The first
        10,000 files are listed (`truncated` if there were more)."""
        branch, changes = await _changes(run, tenant, control)
        files = [DiffFile(path=f.path, insertions=f.insertions, deletions=f.deletions, binary=f.binary)
                 for f in changes.files]
        return DiffFilesOut(branch=branch, base=run.base or "", commit=changes.commit, files=files,
                            insertions=sum(f.insertions for f in files), deletions=sum(f.deletions for f in files),
                            truncated=changes.truncated)

    @get("/{run_id:str}/manifest", operation_id="get_run_manifest",
         summary="The run's steps and exit, as it wrote them",
         responses={**ok(200, MANIFEST, "the run's manifest rows and its exit.json"), **errors(404, 410)})
    async def manifest(self, run: RunDep, control: ControlDep) -> ManifestOut:
        """What the run itself wrote (claims, not the service's measurements: those are on GET /v1/runs/{id});
        `exit` is null until it ended."""
        from sandbox.backends.base import read_exit
        from sandbox.runfiles import read_json

        _gone(run, "manifest")
        folder = control.layout(run).dir
        steps = await asyncio.to_thread(read_json, folder, "run/manifest.json", limit=8 * 1024 * 1024)
        exit_data = await asyncio.to_thread(read_exit, folder)
        rows: list[dict[str, Any]] = [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []
        return ManifestOut(id=run.id, status=run.status, steps=rows, exit=exit_data)


@get("/usage", tags=["runs"], operation_id="get_usage", summary="The tenant's spend on one UTC day (the gateway's)",
     responses={**ok(200, USAGE, "the day's spend and the tenant's budgets"), **errors(400)})
async def usage(tenant: TenantDep, spend: SpendDep, clock: ClockDep,
                day: Annotated[str | None, Parameter(description="a UTC day, YYYY-MM-DD (default: today)")] = None
                ) -> UsageOut:
    """Cost and tokens the model gateway measured for this tenant's runs on ``day`` (default today), and its
    ``budget_usd``."""
    today = day_of(clock.now())
    if day is not None and not _is_day(day):
        raise ValidationException(f"day {day[:40]!r} is not a date: give a UTC day as YYYY-MM-DD (today is "
                                  f"{today}), or leave `day` out for today")
    when = day or today
    spent = spend.spent(tenant.name, when)
    return UsageOut(tenant=tenant.name, day=when, cost_usd=round(spent["cost_usd"], 6),
                    input_tokens=int(spent["input_tokens"]), output_tokens=int(spent["output_tokens"]),
                    budget_usd=Budget(run=tenant.budget_usd.run, day=tenant.budget_usd.day))


def _is_day(text: str) -> bool:
    """``text`` is a calendar day written YYYY-MM-DD (the form the spend table keys its days by)."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True

"""Results reaching the team: the tenant's webhook delivery log, and pushing a run's branch again."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get, post
from litestar.di import NamedDependency, Provide
from litestar.exceptions import HTTPException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter

from ..logging import get_logger
from ..results import Results
from ..results.push import push_due
from .deps import DeliveriesDep, RunDep, TenantDep, provide_run
from .errors import Conflict, Unprocessable, errors, example_error
from .examples import DELIVERIES, PUSHED, ok
from .schemas import DeliveryList, ErrorOut, PushOut, delivery_out, push_out

__all__ = ["ResultsController", "ResultsDep"]

ResultsDep = NamedDependency[Results]

log = get_logger("flower.service.api")


class ResultsController(Controller):
    tags = ["results"]

    @get("/webhooks/deliveries", operation_id="list_webhook_deliveries",
         responses={**ok(200, DELIVERIES, "the tenant's deliveries, newest first"), **errors(400)},
         summary="The tenant's webhook deliveries, newest first")
    async def deliveries(self, tenant: TenantDep, deliveries: DeliveriesDep,
                         limit: Annotated[int, Parameter(ge=1, le=1000)] = 100) -> DeliveryList:
        """Each delivery of the tenant's `webhook_url` (run.started, question.asked, run.ended): how many tries it
        took, the receiver's last HTTP status and error, and when it is tried next while pending."""
        found = deliveries.list(tenant=tenant.name, limit=limit)
        return DeliveryList(deliveries=[delivery_out(d) for d in found])

    @post("/runs/{run_id:str}/push", status_code=200, operation_id="push_run_branch",
          dependencies={"run": Provide(provide_run, sync_to_thread=False)},
          responses={**ok(200, PUSHED, "the branch is on the tenant's push_url at the run's commit"),
                     **errors(404, 409, 422),
                     502: ResponseSpec(ErrorOut, generate_examples=False, description=(
                         "the git server refused the push or could not be reached: the error says why (the run "
                         "stays succeeded; try again once that is fixed)"), examples=[example_error(
                             502, "the git server refused the push: 403 Forbidden (check push_credentials_file)")])},
          summary="Push a succeeded run's branch to the tenant's push_url (again)")
    async def push(self, run: RunDep, tenant: TenantDep, results: ResultsDep) -> PushOut:
        """Pushes `flower/<run>` at the run's commit now, with the credential the service holds, and answers how
        it went; the run's `push` shows the same. A push already under way is not started twice (409)."""
        if tenant.push is None:
            raise Unprocessable(f"tenant {tenant.name} has no push_url: ask the operator to set `push_url` and "
                                "`push_credentials_file` in the tenants file")
        if results.pushing(run.id):
            raise Conflict(f"a push of run {run.id} is under way: GET /v1/runs/{run.id} shows how it ends")
        if not push_due(run, tenant):
            why = (f"it is {run.status}: only a succeeded run's branch is pushed" if run.status != "succeeded" else
                   "its branch was deleted" if not run.branch else "it handed back no work")
            raise Conflict(f"run {run.id} has nothing to push: {why}")
        outcome = await results.push(run, tenant)
        log.info("run.push_requested", tenant=tenant.name, run=run.id, state=outcome.state)
        out = push_out(outcome)
        assert out is not None
        if outcome.state != "pushed":
            raise HTTPException(status_code=502, detail=outcome.error or "the push failed")
        return out

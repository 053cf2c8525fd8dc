"""A running run's human channel: its open questions, answers to them, messages and interrupts."""

from __future__ import annotations

import asyncio
import secrets
import time

import msgspec
from litestar import Controller, get, post
from litestar.di import Provide
from litestar.params import JSONBody
from litestar.exceptions import NotFoundException

from ..logging import get_logger
from ..registry import ACTIVE, Run
from ..scheduler import Scheduler
from ..tenants import Tenant
from .deps import RunDep, SchedulerDep, TenantDep, provide_run
from .errors import Conflict, errors
from .schemas import AcceptedOut, AnswerIn, AnswerOut, MessageOut, QuestionList, QuestionOut, TextIn

__all__ = ["MailboxController"]

log = get_logger("flower.service.api")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _need_active(run: RunDep, what: str) -> None:
    if run.status not in ACTIVE:
        hint = "it has not started yet" if run.status == "queued" else "it has ended"
        raise Conflict(f"run {run.id} is {run.status} ({hint}); {what} only reach a running run")


class MailboxController(Controller):
    path = "/runs/{run_id:str}"
    tags = ["mailbox"]
    dependencies = {"run": Provide(provide_run, sync_to_thread=False)}

    @get("/questions", responses=errors(404), summary="The run's open questions, oldest first")
    async def questions(self, run: RunDep, scheduler: SchedulerDep) -> QuestionList:
        if run.status not in ACTIVE:
            return QuestionList(questions=[])
        found = await asyncio.to_thread(scheduler.questions, run)
        return QuestionList(questions=[QuestionOut(**msgspec.structs.asdict(q)) for q in found])

    @post("/answers", status_code=200, responses=errors(400, 404, 409, 413),
          summary="Answer an open question (its id from GET …/questions or the `ask` event)")
    async def answer(self, run: RunDep, tenant: TenantDep, scheduler: SchedulerDep,
                     data: JSONBody[AnswerIn]) -> AnswerOut:
        _need_active(run, "answers")
        if not any(q.id == data.question_id for q in await asyncio.to_thread(scheduler.questions, run)):
            raise NotFoundException(f"question {data.question_id} is not open on run {run.id} "
                                    "(answered, timed out or never asked); GET its questions to see the open ones")
        await asyncio.to_thread(scheduler.mail, run, f"answers/{data.question_id}.json",
                                {"text": data.text, "answered_at": _now()})
        log.info("run.answered", tenant=tenant.name, run=run.id, question=data.question_id)
        return AnswerOut(question_id=data.question_id, accepted=True)

    @post("/messages", status_code=202, responses=errors(400, 404, 409, 413),
          summary="Tell a running run something without being asked")
    async def message(self, run: RunDep, tenant: TenantDep, scheduler: SchedulerDep,
                      data: JSONBody[TextIn]) -> MessageOut:
        _need_active(run, "messages")
        mid = f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(8)}"
        await asyncio.to_thread(scheduler.mail, run, f"inbox/{mid}.json", {"text": data.text, "sent_at": _now()})
        log.info("run.message", tenant=tenant.name, run=run.id, chars=len(data.text))
        return MessageOut(id=mid, accepted=True)

    @post("/interrupt", status_code=202, responses=errors(400, 404, 409, 413),
          summary="Interrupt the step in flight; it continues with these words")
    async def interrupt(self, run: RunDep, tenant: TenantDep, scheduler: SchedulerDep,
                        data: JSONBody[TextIn]) -> AcceptedOut:
        _need_active(run, "interrupts")
        await asyncio.to_thread(scheduler.mail, run, "interrupt.json", {"words": data.text, "at": _now()})
        log.info("run.interrupt", tenant=tenant.name, run=run.id, chars=len(data.text))
        return AcceptedOut(accepted=True)

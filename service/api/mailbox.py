"""A live run's human channel: its open questions, answers to them, messages and interrupts. A parked run takes them
too: what is written for it wakes it (``Mailbox.wake``), and the sandbox it is resumed in reads it; so does a run
waiting to be resumed after a loss (it reads them when its new sandbox starts)."""

from __future__ import annotations

import asyncio
import secrets
import time

import msgspec
from litestar import Controller, get, post
from litestar.di import Provide
from litestar.exceptions import NotFoundException

from ..logging import get_logger
from ..registry import ACTIVE, Run
from ..tenants import Tenant
from .deps import MailboxDep, RunDep, TenantDep, provide_run
from .errors import Conflict, errors
from .examples import ACCEPTED, ANSWERED, QUESTIONS, SENT, AnswerBody, InterruptBody, MessageBody, ok
from .schemas import AcceptedOut, AnswerOut, MessageOut, QuestionList, QuestionOut

__all__ = ["MailboxController"]

log = get_logger("flower.service.api")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _reachable(run: Run) -> bool:
    """Live, parked, or in line to be resumed: a sandbox of it reads its mailbox now or will."""
    return run.status in ACTIVE or run.status == "parked" or (run.status == "queued" and run.sandboxes > 0)


def _need_active(run: RunDep, what: str) -> None:
    if not _reachable(run):
        hint = "it has not started yet" if run.status == "queued" else "it has ended"
        raise Conflict(f"run {run.id} is {run.status} ({hint}); {what} only reach a running or parked run")


def _woken(mailbox: MailboxDep, run: Run, why: str) -> None:
    if run.status == "parked":
        mailbox.wake(run, why)


class MailboxController(Controller):
    path = "/runs/{run_id:str}"
    tags = ["mailbox"]
    dependencies = {"run": Provide(provide_run, sync_to_thread=False)}

    @get("/questions", operation_id="list_questions", summary="The run's open questions, oldest first",
         responses={**ok(200, QUESTIONS, "the open questions (none once the run ended)"), **errors(404)})
    async def questions(self, run: RunDep, mailbox: MailboxDep) -> QuestionList:
        """What the run is waiting on a person for; answer one with POST …/answers and its `id`."""
        if not _reachable(run):
            return QuestionList(questions=[])
        found = await asyncio.to_thread(mailbox.questions, run)
        return QuestionList(questions=[QuestionOut(**msgspec.structs.asdict(q)) for q in found])

    @post("/answers", status_code=200, operation_id="answer_question",
          summary="Answer an open question (its id from GET …/questions or the `ask` event)",
          responses={**ok(200, ANSWERED, "the answer is in the run's mailbox"), **errors(400, 404, 409, 413)})
    async def answer(self, run: RunDep, tenant: TenantDep, mailbox: MailboxDep,
                     data: AnswerBody) -> AnswerOut:
        """The run reads it at once and goes on; a question already answered or timed out is a 404."""
        _need_active(run, "answers")
        if not any(q.id == data.question_id for q in await asyncio.to_thread(mailbox.questions, run)):
            raise NotFoundException(f"question {data.question_id} is not open on run {run.id} "
                                    "(answered, timed out or never asked); GET its questions to see the open ones")
        await asyncio.to_thread(mailbox.mail, run, f"answers/{data.question_id}.json",
                                {"text": data.text, "answered_at": _now()})
        log.info("run.answered", tenant=tenant.name, run=run.id, question=data.question_id)
        await asyncio.to_thread(_woken, mailbox, run, "its question was answered")
        return AnswerOut(question_id=data.question_id, accepted=True)

    @post("/messages", status_code=202, operation_id="send_message",
          summary="Tell a running run something without being asked",
          responses={**ok(202, SENT, "in the run's inbox"), **errors(400, 404, 409, 413)})
    async def message(self, run: RunDep, tenant: TenantDep, mailbox: MailboxDep,
                      data: MessageBody) -> MessageOut:
        """The run reads its inbox between tool calls; the step in flight is not stopped (see …/interrupt)."""
        _need_active(run, "messages")
        mid = f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(8)}"
        await asyncio.to_thread(mailbox.mail, run, f"inbox/{mid}.json", {"text": data.text, "sent_at": _now()})
        log.info("run.message", tenant=tenant.name, run=run.id, chars=len(data.text))
        await asyncio.to_thread(_woken, mailbox, run, "a message reached it")
        return MessageOut(id=mid, accepted=True)

    @post("/interrupt", status_code=202, operation_id="interrupt_run",
          summary="Interrupt the step in flight; it continues with these words",
          responses={**ok(202, ACCEPTED, "the interrupt is in the run's mailbox"), **errors(400, 404, 409, 413)})
    async def interrupt(self, run: RunDep, tenant: TenantDep, mailbox: MailboxDep,
                        data: InterruptBody) -> AcceptedOut:
        """The model's turn is cut where it is and the step goes on from these words (the run is not ended)."""
        _need_active(run, "interrupts")
        await asyncio.to_thread(mailbox.mail, run, "interrupt.json", {"words": data.text, "at": _now()})
        log.info("run.interrupt", tenant=tenant.name, run=run.id, chars=len(data.text))
        await asyncio.to_thread(_woken, mailbox, run, "it was interrupted")
        return AcceptedOut(accepted=True)

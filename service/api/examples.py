"""Examples for the OpenAPI document, made of the wire types themselves: a field added to a schema and not here
fails at import, and the schema test checks every example against the document and sends the request ones.

``ok(...)`` documents a handler's success answer (its status, type, description and example) in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import msgspec
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import Example
from litestar.params import Body

from ..registry.short_ids import short_of
from .schemas import (AcceptedOut, AnswerIn, AnswerOut, Budget, DeliveryList, DeliveryOut, DiffFile, DiffFilesOut,
                      DiffStat, EventMessage, HealthOut, LossOut, ManifestOut, MessageOut, PushOut, QuestionList, QuestionOut,
                      RunList, RunOut, SubmitIn, SubmitOut, TextIn, Usage, UsageOut)

__all__ = ["ok", "example", "Verbatim", "RUN", "SUBMIT", "SUBMITTED", "RUNS", "FILES", "DIFF", "EVENTS", "MANIFEST",
           "QUESTIONS", "ANSWER", "ANSWERED", "MESSAGE", "SENT", "INTERRUPT", "ACCEPTED", "USAGE", "HEALTHY",
           "REFUSING", "METRICS", "PUSHED", "DELIVERIES", "SubmitBody", "AnswerBody", "MessageBody", "InterruptBody"]

RUN_ID = "20250612-093015-3f9c2a7e5b1d4c6a8e0f1b2c3d4e5f60"
BRANCH = f"flower/{RUN_ID}"
BASE, COMMIT = "9fceb02d0ae598e95dc970b74767f19372d61af8", "e83c5163316f89bfbde7d9ab23ca2e25604af290"

SUBMIT = SubmitIn(ask="Add a --verbose flag to the CLI and a test for it", options={"rounds": 2})
SUBMITTED = SubmitOut(id=RUN_ID, short=short_of(RUN_ID), status="queued", branch=BRANCH)
STAT = DiffStat(files=[DiffFile(path="cli.py", insertions=12, deletions=1),
                       DiffFile(path="tests/test_cli.py", insertions=9, deletions=0)], insertions=21, deletions=1)
PUSHED = PushOut(state="pushed", url="https://git.example.com/acme/app.git", ref=f"refs/heads/{BRANCH}",
                 commit=COMMIT, error=None, at="2025-06-12T09:41:04.118Z", attempts=1)
RUN = RunOut(id=RUN_ID, short=short_of(RUN_ID), status="succeeded", ask=SUBMIT.ask, options=SUBMIT.options,
             branch=BRANCH, base=BASE, commit=COMMIT, created="2025-06-12T09:30:15.204Z",
             started="2025-06-12T09:30:16.911Z", ended="2025-06-12T09:41:02.377Z", cost_usd=0.4182, error=None,
             step="工作", step_label="工作 (work)", diffstat=STAT, events=214,
             cancel_requested=False, disk_bytes=18_874_368, deleted=None,
             usage=Usage(input_tokens=118_204, output_tokens=9_611, cache_write_tokens=20_480,
                         cache_read_tokens=401_336), claimed_cost_usd=0.4175, push=PUSHED, sandboxes=2,
             losses=[LossOut(cause="crashed", at="2025-06-12T09:35:40.120Z", error="the run exited with code 137 "
                             "without writing exit.json (it crashed before finishing)", step="工作",
                             place="tool Bash: npm test", since_checkpoint_s=41.5)], parked_at=None)
DELIVERIES = DeliveryList(deliveries=[
    DeliveryOut(id="d-3f9c2a7e-run.ended", event="run.ended", run=RUN_ID, state="delivered", attempts=1,
                last_status=200, last_error=None, next_try=None, created="2025-06-12T09:41:04.200Z",
                ended="2025-06-12T09:41:04.391Z"),
    DeliveryOut(id="d-3f9c2a7e-run.started", event="run.started", run=RUN_ID, state="delivered", attempts=3,
                last_status=200, last_error=None, next_try=None, created="2025-06-12T09:30:16.950Z",
                ended="2025-06-12T09:31:02.004Z")])
RUNS = RunList(runs=[RUN])
FILES = DiffFilesOut(branch=BRANCH, base=BASE, commit=COMMIT, files=STAT.files, insertions=21, deletions=1,
                     truncated=False)
DIFF = ("diff --git a/cli.py b/cli.py\n--- a/cli.py\n+++ b/cli.py\n@@ -3,1 +3,2 @@\n"
        "-parser = argparse.ArgumentParser()\n+parser = argparse.ArgumentParser()\n"
        "+parser.add_argument('--verbose', action='store_true')\n")
EVENTS = [(EventMessage(id="1", event="step", data='{"seq": 1, "kind": "step", "text": "work (1/2)", "payload": {}}'),
           "a step begins"),
          (EventMessage(id="2", event="ask", data='{"seq": 2, "kind": "ask", "text": "Which log format?", '
                                                  '"payload": {"id": "q-7f3a", "options": ["plain", "json"]}}'),
           "a question: answer it with POST …/answers and payload.id"),
          (EventMessage(event="end", data='{"status": "succeeded", "events": 2}'), "the run ended: the last event")]
MANIFEST = ManifestOut(id=RUN_ID, status="succeeded", exit={"status": "succeeded", "error": None, "cost_usd": 0.4175,
                                                            "steps": [], "exit_code": 0},
                       steps=[{"run": RUN_ID, "step": "work", "attempt": 1, "cost_usd": 0.4175, "status": "done"}])
QUESTIONS = QuestionList(questions=[QuestionOut(id="q-7f3a", question="Which log format?", options=["plain", "json"],
                                                asked_at="2025-06-12T09:33:40Z", timeout_s=3600.0)])
ANSWER = AnswerIn(question_id="q-7f3a", text="plain")
ANSWERED = AnswerOut(question_id="q-7f3a", accepted=True)
MESSAGE = TextIn(text="The CI runs Python 3.11: keep to what it has.")
SENT = MessageOut(id="20250612T093512-5d2c9e0a1b3f4e6d", accepted=True)
INTERRUPT = TextIn(text="Stop there: leave the tests as they are and write the flag's docs instead.")
ACCEPTED = AcceptedOut(accepted=True)
USAGE = UsageOut(tenant="acme", day="2025-06-12", cost_usd=3.2071, input_tokens=902_114, output_tokens=71_530,
                 budget_usd=Budget(run=5.0, day=50.0))
HEALTHY = HealthOut(status="ok", backend="docker")
REFUSING = HealthOut(status="refusing runs", backend="docker", reason="the Bash guard let `rm -rf /` through")
METRICS = ('# HELP flower_run_starts_total Runs whose sandbox was started.\n'
           '# TYPE flower_run_starts_total counter\nflower_run_starts_total{tenant="acme"} 41.0\n')


class Verbatim(Example):
    """An example whose value keeps its nulls (Litestar drops every None from the document it writes, which
    would leave a required ``"error": null`` out and the example not valid against its own schema)."""

    def to_schema(self) -> dict[str, Any]:
        return {**super().to_schema(), "value": self.value}


def example(value: msgspec.Struct | str, summary: str) -> Example:
    return Verbatim(summary=summary, value=value if isinstance(value, str) else msgspec.to_builtins(value))


def ok(status: int, value: msgspec.Struct | str | Sequence[tuple[msgspec.Struct, str]], description: str, *,
       media_type: str | None = None) -> dict[int, ResponseSpec]:
    """The success answer of a handler: ``value``'s type is its schema (text for a string) and ``value`` its
    example; a list gives several examples of one type, each with its summary."""
    values: list[tuple[msgspec.Struct | str, str]] = (
        [(value, description)] if isinstance(value, (msgspec.Struct, str)) else list(value))
    kind: Any = str if isinstance(values[0][0], str) else type(values[0][0])
    extra = {"media_type": media_type} if media_type else {}
    return {status: ResponseSpec(data_container=kind, description=description, generate_examples=False,
                                 examples=[example(v, summary) for v, summary in values], **extra)}


def _body(value: msgspec.Struct, summary: str) -> Any:
    return Body(examples=[example(value, summary)])


# request bodies with their examples: ``data: SubmitBody``
SubmitBody = Annotated[SubmitIn, _body(SUBMIT, "an ask, with an option the tenant may set")]
AnswerBody = Annotated[AnswerIn, _body(ANSWER, "one of the options the question offered")]
MessageBody = Annotated[TextIn, _body(MESSAGE, "something the run should know")]
InterruptBody = Annotated[TextIn, _body(INTERRUPT, "what the step continues with")]

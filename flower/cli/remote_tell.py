"""``flower remote answer|message|interrupt|delete``: what a script tells a run, one API call each.

The words come from the arguments, or from stdin when the only one is ``-``; ``--json`` prints what the service
answered (and which run it was) as one JSON object, the plain output is one line for a person.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TypeVar

from .messages import t
from .terminal import echo, one_line

if TYPE_CHECKING:
    from ..remote import Remote, RunInfo

__all__ = ["VERBS", "add_parsers", "answer", "message", "interrupt", "delete"]

VERBS = ("answer", "message", "interrupt", "delete")
P = TypeVar("P", bound=argparse.ArgumentParser)


def add_parsers(acts: "argparse._SubParsersAction[P]") -> None:
    a = acts.add_parser("answer", help=t("help.remote.answer"))
    a.add_argument("run_id", help=t("help.remote.run"))
    a.add_argument("text", nargs="*", help=t("help.remote.answer_text"))
    a.add_argument("--question", default=None, metavar="ID", help=t("help.remote.question"))
    m = acts.add_parser("message", help=t("help.remote.message"))
    m.add_argument("run_id", help=t("help.remote.run"))
    m.add_argument("text", nargs="+", help=t("help.remote.words"))
    i = acts.add_parser("interrupt", help=t("help.remote.interrupt"))
    i.add_argument("run_id", help=t("help.remote.run"))
    i.add_argument("text", nargs="*", help=t("help.remote.interrupt_words"))
    d = acts.add_parser("delete", help=t("help.remote.delete"))
    d.add_argument("run_id", help=t("help.remote.run"))
    d.add_argument("--branch", action="store_true", help=t("help.remote.delete_branch"))


def _words(parts: list[str]) -> str:
    return sys.stdin.read().strip() if parts == ["-"] else " ".join(parts).strip()


def _said(args: argparse.Namespace, run: "RunInfo", reply: dict[str, object], line: str) -> int:
    if args.json:
        echo(json.dumps({"run": run.id, "short": run.short, **reply}, ensure_ascii=True))
    else:
        echo(line)
    return 0


async def answer(api: "Remote", args: argparse.Namespace) -> int:
    """The oldest open question (or ``--question``'s); an empty answer lets the run decide for itself."""
    run = await api.run(args.run_id)
    who = run.short or run.id
    open_ = await api.questions(run.id)
    q = next((q for q in open_ if q.id == args.question), None) if args.question else (open_[0] if open_ else None)
    if q is None:
        raise ValueError(t("remote.no_such_question", run=who, question=args.question) if args.question
                         else t("remote.nothing_asked", run=who))
    text = _words(args.text)
    await api.answer(run.id, q.id, text)
    return _said(args, run, {"question_id": q.id, "question": q.question, "answer": text, "accepted": True},
                 t("remote.answered", run=who, question=one_line(q.question, 80),
                   answer=one_line(text, 80) or t("remote.empty_answer")))


async def message(api: "Remote", args: argparse.Namespace) -> int:
    run = await api.run(args.run_id)
    text = _words(args.text)
    if not text:
        raise ValueError(t("remote.blank_message"))
    await api.message(run.id, text)
    return _said(args, run, {"text": text, "accepted": True}, t("remote.messaged", run=run.short or run.id))


async def interrupt(api: "Remote", args: argparse.Namespace) -> int:
    from .follow import EMPTY_INTERRUPT

    run = await api.run(args.run_id)
    text = _words(args.text)
    await api.interrupt(run.id, text or EMPTY_INTERRUPT)
    return _said(args, run, {"text": text, "accepted": True},
                 t("remote.interrupted", run=run.short or run.id) + (t("remote.interrupted_with", text=one_line(text, 80))
                                                                     if text else ""))


async def delete(api: "Remote", args: argparse.Namespace) -> int:
    import msgspec

    run = await api.run(args.run_id)
    gone = await api.delete(run.id, branch=args.branch)
    if args.json:
        echo(json.dumps(msgspec.to_builtins(gone), ensure_ascii=True))
        return 0
    echo(t("remote.deleted", run=run.short or run.id) + t("remote.deleted_branch" if args.branch else "remote.kept_branch",
                                                        branch=run.branch or f"flower/{run.id}"))
    return 0

"""A run started again on its own folder (``RunSpec.resume``): what the entrypoint does differently.

The library keeps the continuity — the lineage names each step's session, the session store holds them, a complete
brief makes the flow a wake-up — so the entrypoint adds only what a new sandbox cannot know by itself:

* the ask is not said again once the brief is complete (said again, it would be taken as the person's new words);
* the questions the last sandbox left open (their files in ``outbox/questions``, its process killed before it
  could take them back) are settled here: answered while it had no sandbox (the answer is the person's words to the
  step's question), timed out (the channel's own "nobody answered" — never an invented answer), or still open
  (the step is told to ask again if it still needs to); their files go, so nobody answers a question nobody reads;
* the step that continues its session is told, first, that it was resumed and why;
* the git locks a killed sandbox left in the checkout go (``stale_locks``), or no checkpoint would succeed again.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from .layout import RunLayout
from .spec import RunSpec

__all__ = ["Left", "ask_of", "left_questions", "note_of", "resumed_flow", "stale_locks", "RESUMED"]

RESUMED = {
    "crashed": "上一个沙箱在运行途中被杀掉了(进程被结束、内存不足,或容器引擎重启)",
    "vanished": "上一个沙箱在运行途中没了(容器或 Pod 被删除,或所在机器失联)",
    "killed": "上一个沙箱在运行途中被外面停掉了(容器引擎重启、节点腾空或 Pod 被驱逐)",
    "unparked": "你在等人回答时,这次运行交还了沙箱;现在有了回音,在新沙箱里接着做",
}
STILL_OPEN = "还没有人回答;如果仍然需要,请重新提问。"


@dataclass(frozen=True)
class Left:
    """A question the last sandbox asked and never took an answer for, and what became of it."""

    id: str
    question: str
    answer: str | None
    """The person's words, when they answered while the run had no sandbox."""
    timed_out: bool
    waited: str = ""


def ask_of(spec: RunSpec, layout: RunLayout) -> str:
    """The ask to build the flow with: the spec's, unless the brief is complete (a wake-up: nothing new was said)."""
    from flower.workflow.paths import wake_state

    names = {k: spec.options[k] for k in ("brief_name", "goal_name") if isinstance(spec.options.get(k), str)}
    try:
        waking = wake_state(layout.workspace, run_dir=layout.run_dir, isolate=True, **names)["waking"]
    except (OSError, ValueError):
        waking = False
    return "" if waking else spec.ask


def left_questions(layout: RunLayout, *, now: float | None = None) -> list[Left]:
    """The questions the last sandbox left open, oldest first, each with its answer or its timeout."""
    from flower.core.answers import duration_text

    now = time.time() if now is None else now
    out = []
    for path in sorted(layout.questions.glob("*.json")) if layout.questions.is_dir() else []:
        q = _json(path)
        if not isinstance(q, dict) or not isinstance(q.get("question"), str) or path.name.startswith("."):
            continue
        qid = path.stem
        a = _json(layout.mailbox / "answers" / f"{qid}.json")
        text = a.get("text") if isinstance(a, dict) and isinstance(a.get("text"), str) else None
        timeout = q.get("timeout_s")
        asked = _epoch(q.get("asked_at"))
        late = isinstance(timeout, (int, float)) and asked is not None and now >= asked + float(timeout)
        out.append(Left(qid, q["question"], text, text is None and late,
                        duration_text(float(timeout)) if isinstance(timeout, (int, float)) else ""))
    return out


def note_of(spec: RunSpec, left: list[Left]) -> str:
    """What the continued step reads first: that it was resumed and why, then each question it had left open."""
    from flower.core.channel import TIMEOUT

    assert spec.resume is not None
    lines = [f"[接着做] {RESUMED.get(spec.resume.cause, spec.resume.cause)}。工作区、工作台和之前的对话都在,"
             "从停下的地方接着做,不要重头来过;停下时正在进行的工具调用没有结果,需要的话重做一次。"]
    for q in left:
        if q.answer is not None:
            lines.append(f"你停下前问过:「{q.question}」\n需求方的回答:{q.answer}")
        elif q.timed_out:
            lines.append(f"你停下前问过:「{q.question}」\n" + TIMEOUT.format(waited=f"等了 {q.waited}"))
        else:
            lines.append(f"你停下前问过:「{q.question}」\n{STILL_OPEN}")
    return "\n\n".join(lines)


def resumed_flow(wf: Any, note: str, left: list[Left], layout: RunLayout) -> None:
    """Put ``note`` before the prompt of every step that continues its session; log the left questions' fates in
    the Q&A log; remove their files."""
    from flower.core.qalog import quote

    def first(step: Any) -> Any:
        base = step.resume_prompt if step.resume_prompt is not None else step.prompt

        def render(ctx: dict[str, Any]) -> str:
            return f"{note}\n\n{base(ctx) if callable(base) else base}"
        return render

    wf.steps = [replace(s, resume_prompt=first(s)) for s in wf.steps]
    log = getattr(wf.channel, "log", None)
    for q in left:
        if log is not None:
            if q.answer is not None:
                log.answer(q.id, "answered", quote(q.answer) if q.answer else "(空回复)")
            elif q.timed_out:
                log.answer(q.id, "timeout", "(没有人回答)")
        (layout.questions / f"{q.id}.json").unlink(missing_ok=True)


def stale_locks(layout: RunLayout) -> list[str]:
    """Remove the git locks a killed sandbox left in the run's checkout (``index.lock``, a ref's ``.lock``): nothing
    else uses the checkout now, and with them every checkpoint of the resumed run would fail. The ones removed."""
    git = layout.workspace / ".git"
    if not git.is_dir() or git.is_symlink():
        return []
    gone = []
    for lock in [git / "index.lock", git / "HEAD.lock", git / "config.lock", git / "packed-refs.lock",
                 *(git / "refs").rglob("*.lock")]:
        if lock.is_file() and not lock.is_symlink():
            lock.unlink()
            gone.append(str(lock.relative_to(git)))
    return gone


def _json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _epoch(stamp: object) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None

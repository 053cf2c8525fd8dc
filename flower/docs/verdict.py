"""Verdict: one round of the independent judge — achieved, not yet, or unreachable."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal

from ._sections import Doc, Sections, items

SECTIONS = Sections(
    ("state", "结论", ("判定", "裁决", "结果", "Verdict", "Conclusion", "Result")),
    ("reason", "理由", ("原因", "依据", "Reason", "Reasons", "Rationale")),
    ("failed", "未通过", ("未通过项", "未通过的检查", "未通过检查", "失败项", "Failed", "Failed checks")),
)

VerdictState = Literal["achieved", "not_yet", "unreachable", ""]
"""A verdict's conclusion; "" when the judge gave none that could be read."""

ACHIEVED: Final = "achieved"
NOT_YET: Final = "not_yet"
UNREACHABLE: Final = "unreachable"
_WORDS: dict[VerdictState, tuple[str, ...]] = {
    # "cannot be verified here" is never a pass: it stops and asks a human.
    UNREACHABLE: (
        "无法验证", "没法验证", "验证不了", "无法判定", "不可验证", "无从验证", "不能验证",
        "无法达成", "不可达成", "不可达", "unverifiable", "unreachable", "cannot verify",
        "can't verify", "cannot be verified",
    ),
    NOT_YET: (
        "未达成", "没达成", "没有达成", "未能达成", "尚未达成", "还未达成", "还没达成",
        "未通过", "没通过", "没有通过", "未能通过", "不通过", "无法通过",
        "未完成", "没完成", "没有完成", "未能完成", "无法完成", "尚未", "还没",
        "not yet", "not_yet", "not achieved", "fail", "failed",
    ),
    ACHIEVED: ("达成", "已达成", "通过", "已通过", "完成", "已完成", "achieved", "pass", "passed"),
}
_WORD_STATE = {w: s for s, ws in _WORDS.items() for w in ws}


def _alt(word: str) -> str:
    w = re.escape(word)
    return rf"(?<![a-z_]){w}(?![a-z_])" if word.isascii() else w


# Longest first: at one position 「未达成」 must win over 「达成」.
_STATE_RE = re.compile("|".join(_alt(w) for w in sorted(_WORD_STATE, key=len, reverse=True)), re.I)
_LABEL: dict[VerdictState, str] = {ACHIEVED: "达成", NOT_YET: "未达成", UNREACHABLE: "无法验证"}
_HEAD: dict[VerdictState, str] = {
    NOT_YET: "独立裁判核对后判定:目标尚未达成。",
    UNREACHABLE: "独立裁判判定:目标在当前环境下无法验证或无法达成。",
}


def _state(text: str) -> VerdictState:
    """Recognition order 2–5 of the spec, on the conclusion text.

    Step 3 reads every state word, not only the first: "cannot verify here" anywhere in the
    conclusion makes it unreachable, however it opens ("应该通过,但无法验证" is not a pass —
    the judge that looked at the wrong branch). Otherwise the first word wins.
    """
    s = text.strip()
    if re.fullmatch(r"1|true", s, re.I):
        return ACHIEVED
    if re.fullmatch(r"0|false", s, re.I):
        return NOT_YET
    found = [_WORD_STATE[" ".join(m[0].lower().split())] for m in _STATE_RE.finditer(s)]
    if found:
        return UNREACHABLE if UNREACHABLE in found else found[0]
    if re.search(r"\b1\b", s):
        return ACHIEVED
    if re.search(r"\b0\b", s):
        return NOT_YET
    return ""


@dataclass
class Verdict(Doc):
    """``state`` is achieved / not_yet / unreachable, or "" when the judge was unclear."""

    state: VerdictState = ""
    reason: str = ""
    failed: list[str] = field(default_factory=list)
    sections = SECTIONS

    @classmethod
    def parse(cls, text: str) -> Verdict:
        found, preamble = SECTIONS.parse(text)
        if found.get("state"):
            conclusion = found["state"]
        elif found:
            conclusion = preamble  # sections but no 「结论」: the lead-in is the conclusion
        else:
            conclusion = text or ""
        return cls(_state(conclusion), found.get("reason", ""), items(found.get("failed", "")))

    @property
    def ok(self) -> bool:
        """Whether a conclusion could be read at all. ``ok=False`` must count as "not achieved", never as achieved."""
        return bool(self.state)

    @property
    def achieved(self) -> bool:
        return self.state == ACHIEVED

    @property
    def unreachable(self) -> bool:
        return self.state == UNREACHABLE

    def _values(self) -> dict[str, str]:
        return {
            "state": _LABEL.get(self.state, ""),
            "reason": self.reason,
            "failed": "\n".join(f"- {f}" for f in self.failed),
        }

    def missing(self) -> list[str]:
        """A conclusion always; a reason unless achieved."""
        return SECTIONS.missing(self._values(), ["state"] if self.achieved else ["state", "reason"])

    def feedback(self) -> str:
        """What goes back to the worker for the next round: only what is missing, never the fix; "" once achieved."""
        if self.achieved:
            return ""
        parts = [_HEAD.get(self.state, "独立裁判没有给出明确结论,按未达成处理。")]
        if self.reason.strip():
            parts.append(f"理由:\n{self.reason.strip()}")
        if self.failed:
            parts.append("未通过的检查:\n" + "\n".join(f"- {f}" for f in self.failed))
        parts.append("请针对以上问题继续工作,改完先自己验证;已经通过的部分不要推倒重来。")
        return "\n\n".join(parts)

    def to_markdown(self) -> str:
        return SECTIONS.render(self._values(), title="裁判结论", people=True)

    def prompt_block(self) -> str:
        return SECTIONS.render(self._values(), title="裁判结论", skip_blank=True)

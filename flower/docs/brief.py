"""Brief: the requirement frozen by clarification, read by every later step."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from flower.core.language import language

from ._sections import Doc, Sections

SECTIONS = Sections(
    ("goal", "目标", ("任务目标", "Goal", "Goals", "Objective", "Objectives")),
    (
        "accept",
        "验收标准",
        ("验收", "验收条件", "完成标准", "Acceptance", "Acceptance criteria", "Definition of done"),
    ),
    ("bounds", "边界", ("边界与约束", "范围与边界", "Bounds", "Scope", "Boundaries", "Constraints")),
    (
        "unknowns",
        "未知与假设",
        (
            "未知",
            "假设",
            "未知和假设",
            "未知及假设",
            "未知/假设",
            "Unknowns",
            "Assumptions",
            "Unknowns and assumptions",
            "Unknowns & assumptions",
            "Open questions",
        ),
    ),
)


@dataclass
class Brief(Doc):
    """Four sections in fixed order: goal → accept → bounds → unknowns; all required."""

    goal: str = ""
    accept: str = ""
    bounds: str = ""
    unknowns: str = ""
    path: Path | None = field(default=None, compare=False)
    sections = SECTIONS

    def to_markdown(self) -> str:
        """The whole document for people: a metadata line, all four sections, empty ones marked (未填)."""
        when, missing = datetime.now().strftime('%Y-%m-%d %H:%M'), len(self.missing())
        meta = (f"> 需求确认书 · 写于 {when} · 缺 {missing} 节 · 手改时保留四个标题" if language() == "zh" else
                f"> the requirement as confirmed · written {when} · {missing} section{'' if missing == 1 else 's'} "
                "missing · keep the four headings when you edit it")
        return SECTIONS.render(self._values(), title="需求", meta=meta, people=True)

    def prompt_block(self) -> str:
        """What downstream steps get instead of the clarifier's raw reply: non-empty sections, no metadata."""
        return SECTIONS.render(self._values(), title="需求(已与需求方确认,以此为准,不要再猜)", skip_blank=True)

"""Goal: the statement and checklist the independent judge verifies each round."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ._sections import EMPTY, Doc, Sections, items

SECTIONS = Sections(
    ("statement", "目标", ("目标陈述", "Goal", "Objective", "Statement")),
    ("checks", "检查清单", ("验收清单", "检查项", "验收标准", "Checks", "Checklist", "Acceptance checks")),
)
UNVERIFIABLE = "此环境无法验证"
AMENDED = "(已修改)"


@dataclass
class Goal(Doc):
    """Both the statement and at least one check are required."""

    statement: str = ""
    checks: list[str] = field(default_factory=list)
    path: Path | None = None
    sections = SECTIONS

    @classmethod
    def parse(cls, text: str) -> Goal:
        found, _ = SECTIONS.parse(text)
        return cls(found.get("statement", ""), items(found.get("checks", "")))

    def _values(self) -> dict[str, str]:
        checks = "\n".join(f"{i}. {c}" for i, c in enumerate(self.checks, 1))
        return {"statement": self.statement, "checks": checks}

    @property
    def unverifiable(self) -> list[str]:
        """Checks marked ``[此环境无法验证:…]``: their fate is sealed when the goal is set."""
        return [c for c in self.checks if UNVERIFIABLE in c]

    def amend(self, extra: str) -> Goal:
        """A person changed the goal: appended to the statement after ``(已修改)``, never overwriting.

        Returns ``self`` (so ``g.amend(x).write(path)`` reads naturally); empty text changes nothing.
        """
        extra = (extra or "").strip()
        if extra:
            self.statement = f"{self.statement}\n\n{AMENDED}{extra}".lstrip()
        return self

    def to_markdown(self) -> str:
        """Empty sections (an empty checklist in particular) are written as (空)."""
        return SECTIONS.render(self._values(), title="目标与检查清单", placeholder=EMPTY, people=True)

    def prompt_block(self) -> str:
        return SECTIONS.render(self._values(), title="目标与检查清单", skip_blank=True)

"""One parser for the four documents.

Every document is "a few fixed, named sections" written by a model in loose
markdown. Parsing bugs concentrate here, so the rules live in one place:

* closed code fences are dropped (models paste whole files); a plain or
  markdown fence holding our headings, with none outside it, wraps the whole
  reply and is unwrapped instead;
* an unclosed fence means the output was truncated: everything from it on is
  discarded, so the later sections count as missing;
* headings may be ``## 目标``, ``**目标**``, ``目标:``/``目标：``, ``3. 边界``,
  ``【目标】``, with the body on the same line after a colon;
* aliases are tried longest first, so 「未知」 never eats 「未知与假设」;
* a repeated section keeps its first non-empty body;
* the ``(未填)`` / ``(空)`` markers written by ``to_markdown`` count as empty.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar, Self

from flower.core.files import write_atomic
from flower.core.language import language

UNFILLED = "(未填)"
EMPTY = "(空)"
_ENGLISH_MARKS = {UNFILLED: "(unfilled)", EMPTY: "(empty)"}
_BLANKS = {"", UNFILLED, "（未填）", EMPTY, "（空）", *_ENGLISH_MARKS.values()}
_NONE_ITEMS = {"无", "(无)", "（无）", "没有", "暂无", "none", "n/a", "-", UNFILLED, "（未填）", EMPTY, "（空）",
               *_ENGLISH_MARKS.values()}

HEADINGS = {
    "需求": "requirement", "目标": "goal", "验收标准": "acceptance criteria", "边界": "bounds",
    "未知与假设": "unknowns and assumptions", "目标与检查清单": "goal and checklist", "检查清单": "checklist",
    "裁判结论": "the judge's verdict", "结论": "verdict", "理由": "reasons", "未通过": "failed checks",
    "交接": "handoff", "正在做": "doing", "已决定": "decided", "死路": "dead ends", "下一步": "next", "现场": "scene",
}
"""The documents' headings (the reference fixes them in Chinese) and what an English reader is told they mean:
in English, the copy written for people reads ``## 验收标准 (acceptance criteria)`` (the parser reads it back)."""


def heading(name: str) -> str:
    """A heading as a person reads it: glossed in English (``flower.core.language``), as written in Chinese."""
    return f"{name} ({HEADINGS[name]})" if name in HEADINGS and language() == "en" else name

_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_ITEM = re.compile(r"^[ \t]*(?:[-*+•]|\d{1,3}[.)、])[ \t]+(?:\[[ xX]\][ \t]+)?(?P<text>.*\S)")
_HEAD = r"""
^[ \t]{{0,3}}
(?P<hash>\#{{1,6}}[ \t]*)?
(?P<num>(?:\d{{1,2}}|[一二三四五六七八九十]{{1,3}})[.)、．][ \t]*)?
(?P<bold>\*\*|__)?
(?P<bracket>[【「\[])?
(?P<name>{names})
(?(bracket)[】」\]])
(?:[ \t]*[（(][^（()）\n]{{0,40}}[）)])?
[ \t]*(?P<colon1>[:：])?
(?P<unbold>[ \t]*(?:\*\*|__))?
[ \t]*(?P<colon2>[:：])?
[ \t]*(?P<body>.*?)[ \t]*$
"""


def blank(text: str | None) -> bool:
    """True for empty text and for the ``(未填)`` / ``(空)`` markers a human left in place."""
    return (text or "").strip() in _BLANKS


def items(text: str) -> list[str]:
    """List items of a section (``-``, ``*``, ``1.``, ``- [ ]``); plain lines if there are none."""
    out: list[str] = []
    for line in text.splitlines():
        m = _ITEM.match(line)
        if m:
            out.append(m["text"].strip())
        elif line.strip() and out:
            out[-1] += " " + line.strip()  # wrapped continuation of the last item
    if not out:
        out = [line.strip() for line in text.splitlines() if line.strip()]
    return [i for i in out if i.lower() not in _NONE_ITEMS]


def _norm(name: str) -> str:
    return " ".join(name.lower().split())


class Sections:
    """An ordered table of sections: ``(key, canonical title, aliases)``."""

    def __init__(self, *specs: tuple[str, str, Iterable[str]]) -> None:
        self.titles: dict[str, str] = {key: title for key, title, _ in specs}
        self._alias: dict[str, str] = {}
        for key, title, aliases in specs:
            for name in (title, *aliases):
                self._alias[_norm(name)] = key
        names = sorted(self._alias, key=len, reverse=True)  # longest first
        alternation = "|".join(re.escape(n).replace(r"\ ", r"[ \t]+") for n in names)
        self._head = re.compile(_HEAD.format(names=alternation), re.I | re.X)

    def heading(self, line: str) -> tuple[str, str] | None:
        """``(key, inline body)`` if the line is a heading of this table."""
        m = self._head.match(line)
        if not m:
            return None
        colon = m["colon1"] or m["colon2"]
        closed = (m["bold"] and m["unbold"]) or m["bracket"]
        if not (m["hash"] or m["num"] or closed or colon):
            return None  # a bare word on a line is body text, not a heading
        if m["bold"] and not m["unbold"] and not colon:
            return None  # "**目标是…**" is bold prose
        body = m["body"]
        if body and not (colon or closed):
            return None  # "## 目标与范围", "目标是做 X": not our heading
        if m["bold"] and not m["unbold"]:
            body = body.removesuffix(m["bold"]).rstrip()  # "**目标：做 X**"
        return self._alias[_norm(m["name"])], body

    def unfence(self, text: str) -> str:
        """Drop closed fences, unwrap one that wraps the whole reply, cut at an unclosed fence."""
        lines = text.splitlines()
        out: list[str] = []
        i = 0
        while i < len(lines):
            m = _FENCE.match(lines[i])
            if not m or (m["fence"][0] == "`" and "`" in m["info"]):
                out.append(lines[i])  # not a fence (```inline``` code is not one)
                i += 1
                continue
            fence, info = m["fence"], m["info"].strip().lower()
            end = next((j for j in range(i + 1, len(lines)) if _closes(lines[j], fence)), None)
            if end is None:
                break  # truncated output: nothing after this point is trustworthy
            inner, outside = lines[i + 1 : end], lines[:i] + lines[end + 1 :]
            if info in ("", "markdown", "md") and self._has_heading(inner) and not self._has_heading(outside):
                out.extend(self.unfence("\n".join(inner)).splitlines())  # the whole reply was fenced
            i = end + 1
        return "\n".join(out)

    def _has_heading(self, lines: list[str]) -> bool:
        return any(self.heading(x) for x in lines)

    def parse(self, text: str | None) -> tuple[dict[str, str], str]:
        """Section bodies by key (first non-empty wins) and the text before the first heading."""
        preamble: list[str] = []
        chunks: list[tuple[str, list[str]]] = []
        buf = preamble
        for line in self.unfence(text or "").splitlines():
            head = self.heading(line)
            if head is None:
                buf.append(line)
            elif chunks and chunks[-1][0] == head[0]:
                if head[1]:
                    buf.append(line)  # "未知：A" under 「未知与假设」 is content, not a new section
            else:
                buf = [head[1]] if head[1] else []
                chunks.append((head[0], buf))
        found: dict[str, str] = {}
        for key, lines in chunks:
            body = "\n".join(lines).strip()
            if not found.get(key):
                found[key] = "" if blank(body) else body
        return found, "\n".join(preamble).strip()

    def missing(self, values: dict[str, str], required: Iterable[str] | None = None) -> list[str]:
        """Canonical titles of required sections that are empty."""
        keys = self.titles if required is None else required
        return [self.titles[k] for k in keys if blank(values.get(k))]

    def render(self, values: dict[str, str], *, title: str = "", skip_blank: bool = False,
               meta: str = "", placeholder: str = UNFILLED, people: bool = False) -> str:
        """Markdown with canonical headings; empty sections get ``placeholder`` unless skipped.

        ``meta`` is a header line under the title (for humans; parsing ignores it). ``people``: the copy a person
        reads (``to_markdown``), its headings glossed in English; the model's copy (``prompt_block``) stays as the
        reference writes it.
        """
        named = heading if people else (lambda name: name)
        if people and language() == "en":
            placeholder = _ENGLISH_MARKS.get(placeholder, placeholder)
        parts = [f"# {named(title)}"] if title else []
        if meta:
            parts.append(meta)
        for key, name in self.titles.items():
            body = "" if blank(values.get(key)) else (values.get(key) or "").strip()
            if body or not skip_blank:
                parts.append(f"## {named(name)}\n{body or placeholder}")
        return "\n\n".join(parts) + "\n"


def _closes(line: str, fence: str) -> bool:
    s = line.strip()
    return len(s) >= len(fence) and set(s) == {fence[0]}


class Doc:
    """What the four documents share, so they parse, check and persist the same way.

    A document is a dataclass whose fields are named by the keys of its ``sections``
    table; ``required`` lists the keys that must be filled (None: all of them).
    """

    sections: ClassVar[Sections]
    required: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def parse(cls, text: str) -> Self:
        found, _ = cls.sections.parse(text)
        return cls(**found)

    def _values(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in self.sections.titles}

    def missing(self) -> list[str]:
        """Canonical titles of the required sections that are empty."""
        return self.sections.missing(self._values(), self.required)

    def to_markdown(self) -> str:
        raise NotImplementedError

    def complete(self) -> bool:
        return not self.missing()

    def write(self, path: str | Path) -> Path:
        """Write ``to_markdown()`` atomically (a killed run never leaves half a file); returns the resolved path."""
        p = write_atomic(Path(path).resolve(), self.to_markdown())
        if hasattr(self, "path"):
            setattr(self, "path", p)  # the documents that keep where they live (not declared here)
        return p

    @classmethod
    def load(cls, path: str | Path) -> Self | None:
        """Parse the file, or None when it does not exist or cannot be read."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        doc = cls.parse(text)
        if hasattr(doc, "path"):
            setattr(doc, "path", p.resolve())
        return doc

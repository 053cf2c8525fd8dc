"""The workbench: where an agent keeps what it will need again.

Three directories and an index. The index goes into the system prompt, so every
turn the agent knows what it already has on hand (scripts it wrote, long
products, decisions) instead of redoing or re-reading them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from .files import write_atomic

__all__ = ["Workbench"]

_DESC = re.compile(r"^\s*(?:#|//|--)\s*desc\s*[:：]\s*(.+?)\s*$", re.I)
_COMMENT = re.compile(r"^\s*(?:#|//|--)+\s*(.*?)\s*$")
_DOCSTRING = re.compile(r'^\s*[rRuUbB]?("""|\'\'\')\s*(.*?)\s*(?:\1)?\s*$')
_SKIP = re.compile(r"^\s*#!|^\s*#.*-\*-|^\s*#\s*(?:type|noqa|pragma|pylint|fmt)\s*:", re.I)
_DESC_LINES = 8
_DESC_MAX = 100
_SECTIONS = (
    ("scripts", "会再次运行的脚本"),
    ("artifacts", "长产物"),
    ("notes", "关键决定"),
)


def _describe(path: Path) -> str:
    """One line saying what a file is: `desc:` marker, else first comment, else docstring."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head = [line for _, line in zip(range(_DESC_LINES), f)]
    except OSError:
        return ""
    for line in head:
        m = _DESC.match(line)
        if m:
            return m.group(1)[:_DESC_MAX]
    in_doc = False
    for line in head:
        if not line.strip() or _SKIP.match(line):
            continue
        if in_doc:  # the docstring opened alone on its line: its first line is here
            return line.strip().strip("\"'").strip()[:_DESC_MAX]
        m = _COMMENT.match(line)
        if m and re.search(r"\w", m.group(1)):
            return m.group(1)[:_DESC_MAX]
        m = _DOCSTRING.match(line)
        if m:
            if m.group(2):
                return m.group(2)[:_DESC_MAX]
            in_doc = True
    return ""


@dataclass
class Workbench:
    workspace: Path
    dirname: str = ".flower"
    max_index_entries: int = 40
    home: Path | None = None
    _descriptions: dict[tuple[str, int, int], str] = field(default_factory=dict, init=False, repr=False,
                                                           compare=False)

    def __post_init__(self) -> None:
        self.workspace = Path(self.workspace).resolve()
        if self.home is not None:
            self.home = Path(self.home).resolve()

    # -- where things are --------------------------------------------------
    @cached_property
    def root(self) -> Path:
        """`home` if given (then `dirname` is ignored), else `workspace/dirname`. Cached, as the paths below:
        every Write into the workbench asks for them (pathlib joins cost microseconds each)."""
        return self.home if self.home is not None else self.workspace / self.dirname

    @property
    def external(self) -> bool:
        """True when the root is outside the workspace (isolation mode): paths must be absolute."""
        return not self.root.resolve().is_relative_to(self.workspace)

    @cached_property
    def scripts(self) -> Path:
        return self.root / "scripts"

    @cached_property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @cached_property
    def notes(self) -> Path:
        return self.root / "notes"

    @cached_property
    def index_path(self) -> Path:
        return self.root / "INDEX.md"

    def show(self, p: Path) -> str:
        """The path as the model should see it: relative inside the workspace, absolute outside."""
        p = Path(p)
        if not p.is_absolute():
            return str(p)
        return str(p.relative_to(self.workspace)) if p.is_relative_to(self.workspace) else str(p)

    # -- disk ----------------------------------------------------------------
    def ensure(self) -> "Workbench":
        for d in (self.scripts, self.artifacts, self.notes):
            if not os.path.isdir(d):  # one stat, where mkdir(exist_ok) costs a failed syscall and a stat
                d.mkdir(parents=True, exist_ok=True)
        return self

    def scan(self, d: str | os.PathLike[str]) -> list[tuple[str, str, int]]:
        """(shown path, description, bytes) of every file under `d`, dotfiles skipped.

        Every Write into the workbench rescans it (``index_guard``), so a file's description
        is read once per (size, mtime), and the walk is ``os.scandir``, not pathlib.
        """
        if not os.path.isdir(d):
            return []
        found: list[tuple[str, os.stat_result]] = []
        stack = [os.fspath(d)]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    for e in it:
                        if e.name.startswith("."):
                            continue
                        if e.is_dir(follow_symlinks=False):  # as rglob: a linked folder is not walked
                            stack.append(e.path)
                        elif e.is_file():
                            found.append((e.path, e.stat()))
            except OSError:
                continue
        out = []
        cache = self._descriptions
        inside = str(self.workspace).rstrip(os.sep) + os.sep  # show(), on strings: scandir's paths are normal
        for path, st in sorted(found, key=lambda f: f[0].split(os.sep)):  # pathlib's order, part by part
            key = (path, st.st_size, st.st_mtime_ns)
            desc = cache.get(key)
            if desc is None:
                desc = cache[key] = _describe(Path(path))
            out.append((path[len(inside):] if path.startswith(inside) else path, desc, st.st_size))
        if len(cache) > 4 * max(len(found), 256):  # rewritten files leave old keys behind
            live = {(p, st.st_size, st.st_mtime_ns) for p, st in found}
            for k in [k for k in cache if k not in live]:
                del cache[k]
        return out

    def _listing(self, limit: int | None) -> list[str]:
        lines: list[str] = []
        for name, title in _SECTIONS:
            entries = self.scan(os.path.join(self.root, name))
            lines.append(f"{name}/({title}):" if entries else f"{name}/({title}):无")
            shown = entries if limit is None else entries[:limit]
            for path, desc, size in shown:
                lines.append(f"- `{path}` {size}B" + (f" — {desc}" if desc else ""))
            if len(entries) > len(shown):
                lines.append(f"- …还有 {len(entries) - len(shown)} 个,见 `{self.show(self.index_path)}`")
        return lines

    def refresh(self) -> str:
        """Rewrite INDEX.md (every entry, unbounded) and return its text; an unchanged index is left alone.

        Left alone because a rename over an existing file makes ext4 flush it: milliseconds
        on every Write into the workbench, for an index that mostly reads the same.
        """
        self.ensure()
        text = "\n".join(["# 工作台索引", "", f"工作台:`{self.root}`", "", *self._listing(None), ""])
        try:
            with open(self.index_path, encoding="utf-8") as f:
                if f.read() == text:
                    return text
        except (OSError, UnicodeDecodeError):
            pass
        write_atomic(self.index_path, text)  # concurrent hooks refresh it at once: a shared temp name would collide
        return text

    def prompt_block(self) -> str:
        """What goes into the system prompt every turn: kept short, at most
        `max_index_entries` entries per directory."""
        where = self.show(self.root)
        lines = [
            "## 工作台",
            f"工作台目录:`{where}`" + (f"(绝对路径 `{self.root}`)" if where != str(self.root) else ""),
            "三条规矩:",
            f"1. 会运行第二次的脚本写进 `{self.show(self.scripts)}/`,第一行写 `# desc: 一句话说明`。",
            f"2. 超过 2000 字的产物写进 `{self.show(self.artifacts)}/`,对话里只给路径和结论。",
            f"3. 关键决定写进 `{self.show(self.notes)}/`,一个决定一个文件。",
        ]
        if self.external:
            lines.append("工作台在工作区之外,访问它一律用绝对路径。")
        lines += ["", "现有内容:", *self._listing(self.max_index_entries)]
        return "\n".join(lines)

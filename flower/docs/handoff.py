"""Handoff: what a session writes when its context is nearly full, for a fresh one.

Also the three runtime helpers around it: ``is_overflow`` turns a hard
"context full" error into an immediate handoff, ``HANDOFF_PROMPT`` makes the
current session write its own handoff (only it has that context), and
``degraded`` builds one mechanically when writing it failed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from flower.core.language import language

from ._sections import EMPTY, Doc, Sections, heading

SECTIONS = Sections(
    ("doing", "正在做", ("当前在做", "进行中", "Doing", "In progress", "Current work")),
    ("decided", "已决定", ("已定", "已做的决定", "决定", "Decided", "Decisions")),
    ("deadends", "死路", ("走不通的路", "死胡同", "Dead ends", "Deadends", "Dead-ends")),
    ("next", "下一步", ("接下来", "Next", "Next step", "Next steps")),
    ("scene", "现场", ("现场状态", "工作区现状", "Scene", "Workspace state")),
)
DEGRADED = "[降级:交接没写成]"
_TITLE = re.compile(r"^#[ \t]*交接(?:[ \t]*\([^)\n]{0,40}\))?[ \t]*[:：][ \t]*(?P<step>.+?)[ \t]*$", re.M)

# Normalised with _ → space and backticks dropped, so the API's
# "input length and `max_tokens` exceed context limit" and
# "model_context_window_exceeded" match too.
_OVERFLOW = re.compile(
    r"prompt is too long"
    r"|context length exceeded"
    r"|maximum context length"
    r"|too many total text bytes"
    r"|input length and max tokens exceed"
    r"|context window (?:exceeded|is full)"
    r"|exceed(?:s|ed)? (?:the |its |your )?(?:model'?s )?(?:maximum )?context"
)

HANDOFF_PROMPT = """[交接] 你的上下文已用到约 {used}/{window} tokens,快满了。现在停下手头的工作,不要再调用任何工具,直接用文字写一份交接文档。
接手的是一个全新的会话:它看不到我们之前的任何对话,只能看到这份文档和工作区本身。

严格按下面五个标题写,标题原样保留,只写事实:

## 正在做
当前在做哪件事,做到了哪一步。

## 已决定
已经定下来的做法和理由,接手者不应推翻。

## 死路
试过但走不通的路和原因;没有就写“无”。

## 下一步
接手者第一步该做什么,越具体越好(文件、命令)。

## 现场
工作区现状:改过哪些文件,产物和笔记在哪,哪些验证过了、哪些没过,有没有还在跑的进程。

提到文件就给路径,不要粘贴文件内容、日志、diff 或大段代码。"""


def is_overflow(*texts: str | None) -> bool:
    """Whether any text is a "context is full" error from the API or the CLI."""
    for t in texts:
        if t and _OVERFLOW.search(t.lower().replace("`", "").replace("_", " ")):
            return True
    return False


@dataclass
class Handoff(Doc):
    """Five sections; only ``doing`` and ``next`` are required. ``step`` is metadata."""

    doing: str = ""
    decided: str = ""
    deadends: str = ""
    next: str = ""
    scene: str = ""
    step: str = ""
    path: Path | None = field(default=None, compare=False)
    sections = SECTIONS
    required = ("doing", "next")  # demanding dead ends would make the model invent some

    @classmethod
    def parse(cls, text: str, *, step: str = "") -> Handoff:
        """The five sections; ``step`` is metadata (given, else read back from the ``# 交接:<step>`` title)."""
        found, preamble = SECTIONS.parse(text)
        if not step:
            m = _TITLE.search(preamble)
            step = m["step"] if m else ""
        return cls(**found, step=step)  # type: ignore[arg-type]  # found holds the section texts only

    @property
    def degraded(self) -> bool:
        """Whether this is the mechanical stand-in written when the session could not write its own."""
        return any(DEGRADED in getattr(self, k) for k in SECTIONS.titles)

    def to_markdown(self) -> str:
        if self.step and language() == "en":
            title = f"{heading('交接')}: {self.step}"
        else:
            title = f"交接:{self.step}" if self.step else "交接"
        return SECTIONS.render(self._values(), title=title, placeholder=EMPTY, people=True)

    def prompt_block(self) -> str:
        """The whole prompt of the fresh session that takes over."""
        what = f"步骤「{self.step}」" if self.step else "这项工作"
        head = (
            f"你是接手{what}的新会话。上一个会话的上下文快满了,它写下这份交接文档后退场;"
            "你看不到它之前的对话,只有这份交接和工作区本身。\n"
            "先核对「现场」和工作区实际是否一致,再从「下一步」接着做;"
            "「已决定」的不要推翻重来,「死路」里的路别再走。"
        )
        return f"{head}\n\n{SECTIONS.render(self._values(), title='交接', skip_blank=True)}"


def degraded(step: str, prompt: str, *, why: str = "") -> Handoff:
    """A mechanical handoff when the session could not write one; always complete."""
    reason = f":{why}" if why else ""
    return Handoff(
        doing=f"{DEGRADED}(交接未能写出{reason};这是机械生成的交接,上一个会话的进展没有记录下来)",
        next="重新阅读任务并从工作区现状继续",
        scene=(prompt or "")[:1200],
        step=step,
    )

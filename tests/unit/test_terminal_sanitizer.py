"""The one terminal sanitizer: hostile strings a run can put in front of a person, and what reaches the terminal.

The corpus is what an attacker inside a run would try (the model's text, a tool name it chooses, an ask, a path):
clipboard writes, retitles, screen clears, 8-bit (C1) introducers that pass a 7-bit filter, bidi reordering,
carriage-return and backspace overwrites. The last test reads flower/cli and flower/remote: nothing in them
writes to a stream except through ``Terminal``.
"""

from __future__ import annotations

import ast
import io
import unicodedata
from pathlib import Path

import pytest

from flower.cli.screen import Screen
from flower.cli.terminal import Style, Terminal, clean, echo
from flower.core.events import Event

CORPUS = [
    # (what it is, what the run wrote, what the person sees)
    ("OSC 52 clipboard write, BEL-ended", "copy\x1b]52;c;cm0gLXJmIH4=\x07done", "copydone"),
    ("OSC 52 clipboard write, ST-ended", "a\x1b]52;c;cm0gLXJmIH4=\x1b\\b", "ab"),
    ("OSC 0 title", "\x1b]0;you have been pwned\x07ok", "ok"),
    ("OSC 2 title, ST-ended", "\x1b]2;pwned\x1b\\ok", "ok"),
    ("OSC 8 hyperlink", "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", "click"),
    ("CSI 2J clear and home", "\x1b[2J\x1b[Hclean slate", "clean slate"),
    ("CSI colours", "\x1b[31;1mred\x1b[0m", "red"),
    ("CSI cursor up and erase line", "fine\x1b[1A\x1b[2Kforged", "fineforged"),
    ("CSI with the C1 introducer U+009B", "\x9b2J\x9b1;1Hx", "x"),
    ("OSC via U+009D, ended by U+009C", "\x9d52;c;cm0gLXJmIH4=\x9cx", "x"),
    ("OSC via U+009D, ended by BEL", "\x9d0;title\x07x", "x"),
    ("DCS, 7-bit", "\x1bP+q544e\x1b\\x", "x"),
    ("DCS via U+0090", "\x90qpayload\x9cx", "x"),
    ("APC, PM and SOS", "\x1b_apc\x1b\\\x1b^pm\x1b\\\x1bXsos\x1b\\x", "x"),
    ("terminal reset (RIS) and charset switch", "\x1bc\x1b(0x", "x"),
    ("a lone ESC at the end", "x\x1b", "x"),
    ("an unterminated OSC stops at the line's end", "a\x1b]0;title\nb", "a\nb"),
    ("C1 NEL, RI, IND", "a\x85b\x8dc\x84d", "abcd"),
    ("APC and PM via U+009F and U+009E", "\x9fapc\x9c\x9epm\x9cx", "x"),
    ("bidi override (the .exe that reads as .txt)", "invoice\u202etxt.exe", "invoicetxt.exe"),
    ("bidi embeddings and isolates", "\u202aa\u202bb\u202cc\u2066d\u2067e\u2068f\u2069", "abcdef"),
    ("marks: LRM, RLM, ALM", "a\u200eb\u200fc\u061cd", "abcd"),
    ("carriage return overwrite", "echo safe\rrm -rf ~", "echo safe\nrm -rf ~"),
    ("backspace overwrite", "ls -l\b\b\b\b\brm -rf /", "ls -lrm -rf /"),
    ("BEL", "ding\x07", "ding"),
    ("NUL, DEL, vertical tab, form feed", "a\x00b\x7fc\x0bd\x0ce", "abcde"),
    ("zero-width space and joiners", "pay\u200bpal\u200c\u200d\u2060\ufeff", "paypal"),
    ("tag characters (invisible ASCII)", "ok\U000e0041\U000e0042\U000e007f", "ok"),
    ("line and paragraph separators", "a\u2028b\u2029c", "abc"),
    ("a lone surrogate", "a\ud800b", "ab"),
    ("what stays: tabs, newlines, CJK, emoji, accents", "你好\tworld\n🙂 café", "你好\tworld\n🙂 café"),
]

ESC_C1_BIDI = {chr(c) for c in range(0x20) if chr(c) not in "\t\n"} | {chr(c) for c in range(0x7f, 0xa0)} \
    | {chr(c) for c in range(0x202a, 0x202f)} | {chr(c) for c in range(0x2066, 0x206a)}


def _obeyed(text: str) -> set[str]:
    """Characters a terminal would act on or hide rather than show."""
    return {c for c in text if c in ESC_C1_BIDI or unicodedata.category(c) in ("Cc", "Cf", "Cs") and c not in "\t\n"}


@pytest.mark.parametrize(("what", "hostile", "shown"), CORPUS, ids=[c[0] for c in CORPUS])
def test_each_hostile_string_reaches_the_terminal_as_plain_text(what: str, hostile: str, shown: str):
    assert clean(hostile) == shown, what
    assert clean(clean(hostile)) == shown, "cleaning twice changes nothing"
    out = io.StringIO()
    Terminal(out).line(hostile)
    assert out.getvalue() == shown + "\n" and not _obeyed(out.getvalue())


def test_our_own_colours_are_emitted_by_name_around_cleaned_text():
    out = io.StringIO()
    Terminal(out).line("+added\x1b]52;c;eA==\x07\u202e", style=Style.GREEN)
    assert out.getvalue() == "\x1b[32m+added\x1b[0m\n"
    Terminal(out).erase(2)
    assert out.getvalue().endswith("\r\x1b[2A\x1b[J")


def test_echo_writes_through_the_sanitizer_to_the_stream_of_the_moment(capsys: pytest.CaptureFixture[str]):
    echo("out\x1b]0;t\x07\x9b2J")
    echo("err\u202e\x9d52;c;eA==\x07", err=True)
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("out\n", "err\n")


def test_the_screen_shows_a_model_chosen_tool_name_and_text_without_their_escapes():
    out = io.StringIO()
    screen = Screen(out=out, verbose=True)
    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07Bash\x9b2J\u202e"
    for ev in [Event("tool_call", "ls \x1b]0;pwned\x07", tool=hostile, payload={"id": "t1"}),
               Event("tool_result", "\x9d0;title\x07done\x1b[2J", payload={"tool_use_id": "t1"}),
               Event("text", "line one\rline two\x1bc", payload={}),
               Event("ask", "which?\u2066", payload={"id": "q", "state": "asked", "options": ["\x1b[31mred"]})]:
        screen.event(ev)
    text = out.getvalue()
    assert screen.errors == [] and not _obeyed(text.replace("\n", "")), repr(text)
    assert "* Bash ls" in text and "→ done" in text and "line one\n" in text and "1) red" in text, text


# -- nothing writes to a terminal but the Terminal -----------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
STREAMS = {"stdout", "stderr", "__stdout__", "__stderr__"}


def _bypasses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "input"):
            found.append(f"{node.func.id}()")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner, name = node.value.id, node.attr
            if (owner == "sys" and name in STREAMS) or (owner == "os" and name == "write") \
                    or (owner == "traceback" and name.startswith("print")):
                found.append(f"{owner}.{name}")
    return [f"{path.relative_to(ROOT)}: {x}" for x in found]


def test_no_command_writes_to_a_stream_except_through_the_terminal():
    sources = sorted((ROOT / "flower" / "cli").glob("*.py")) + sorted((ROOT / "flower" / "remote").glob("*.py"))
    assert len(sources) > 15
    found = [x for path in sources if path.name != "terminal.py" for x in _bypasses(path)]
    assert found == []


def test_the_librarys_own_log_lines_go_through_the_sanitizer_too(capsys: pytest.CaptureFixture[str]):
    """structlog, unconfigured, prints to stdout itself (values repr'd, the event as it is); a run's command routes
    it through the Terminal."""
    import structlog

    from flower.cli.terminal import route_library_logs

    structlog.reset_defaults()
    try:
        route_library_logs()
        structlog.get_logger("flower.channel").warning("note\x1b]0;pwned\x07\x9b2J\u202e", text="bad file")
    finally:
        structlog.reset_defaults()
    out = capsys.readouterr().out
    assert "note" in out and "bad file" in out and not _obeyed(out.replace("\n", "")), repr(out)

"""docs/environment.md, the teams' page, as a reader meets it: its shell blocks run in order in one shell (from an
empty folder, the venv's python first on PATH), and what each prints is the text block that follows it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "environment.md"
MARK = "@@ block done @@"


def blocks() -> list[tuple[str, str]]:
    """(the shell block, the text block right after it) pairs, in the page's order."""
    found = re.findall(r"```(bash|text)\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    pairs = []
    for (kind, body), (next_kind, after) in zip(found, found[1:]):
        if kind == "bash":
            assert next_kind == "text", f"the block {body[:60]!r} shows no output"
            pairs.append((body, after))
    return pairs


def test_every_command_of_the_page_prints_what_the_page_shows(tmp_path: Path) -> None:
    pairs = blocks()
    assert len(pairs) == 2
    script = "".join(f"{body}echo '{MARK}'\n" for body, _ in pairs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=120)
    printed = (out.stdout).split(MARK + "\n")
    said = out.stderr.split(MARK + "\n") if MARK in out.stderr else [out.stderr]
    assert out.returncode == 0, out.stderr
    assert printed[0] == pairs[0][1]
    # the refusal goes to stderr, the exit code to stdout: the reader's terminal shows them in that order
    assert said[0] + printed[1] == pairs[1][1], (said, printed)

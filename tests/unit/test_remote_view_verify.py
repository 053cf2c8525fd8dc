"""``flower remote`` shows each of the team's checks a service run made (its ``verify`` events) in one line."""

from __future__ import annotations

import io

import pytest

from flower.cli.follow import RemoteView
from flower.cli.screen import Screen
from flower.remote import StreamEvent


@pytest.mark.parametrize(("lang", "failed", "passed"), [
    ("en", "  x the team's check: verify `python3 -m unittest` exited 1",
     "  + the team's check: verify `python3 -m unittest` exited 0"),
    ("zh", "  x 团队的检查:verify `python3 -m unittest` exited 1", "  + 团队的检查:verify `python3 -m unittest` exited 0"),
])
def test_a_check_is_one_line_marked_by_how_it_ended(monkeypatch, lang: str, failed: str, passed: str) -> None:
    monkeypatch.setenv("FLOWER_LANG", lang)
    out = io.StringIO()
    view = RemoteView(Screen(out=out))
    for n, code in enumerate((1, 0), 1):
        view.show(StreamEvent(seq=n, kind="verify", text=f"verify `python3 -m unittest` exited {code}",
                              payload={"exit_code": code, "passed": code == 0, "tail": "FAILED\x1b[2J"}, step="工作"))
    lines = [line for line in out.getvalue().splitlines() if "check" in line or "检查" in line]
    assert lines == [failed, passed]

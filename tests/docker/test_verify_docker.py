"""The judge runs the team's check in a run's container: flower's own image, the real CLI inside against the scripted
model, a team's repository whose ``python3 -m unittest`` fails until calc.py is fixed. The ask sets ``verify`` (a run
option, ``RunSpec.verify``); each round of the work runs it in a copy of the worktree before the judge."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from flower.testing import Rule, ScriptedModel, say
from sandbox.testing import ACHIEVED, JUDGE, LEAD, Person, prepare, read_events, starter_rules
from test_sandbox_docker import backend, sandbox_image  # noqa: F401 - the image and a labelled backend

pytestmark = [pytest.mark.docker, pytest.mark.cli]

CMD = "python3 -m unittest"
BUGGY, FIXED = "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a + b\n"
TEST = ("import os\nimport unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
        "    def test_cache(self):  # leaves a folder its owner cannot enter: the copy must go all the same\n"
        "        os.makedirs('build/cache')\n        os.chmod('build/cache', 0)\n        os.chmod('build', 0)\n")


def team_repo(path: Path) -> Path:
    """A team's repository with one failing unit test (calc.add subtracts)."""
    path.mkdir(parents=True)
    (path / "calc.py").write_text(BUGGY)
    (path / "test_calc.py").write_text(TEST)
    for args in (["init", "-q", "-b", "main"], ["add", "."],
                 ["-c", "user.email=t@flower.invalid", "-c", "user.name=t", "commit", "-qm", "calc"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    return path


def _run(backend, tmp_path: Path, run_id: str, rules_for) -> tuple[int, dict, list[dict], ScriptedModel]:  # noqa: F811
    repo, runs = team_repo(tmp_path / "calc"), tmp_path / "runs"
    with ScriptedModel(rules_for(runs / run_id / repo.name)) as model:
        layout, spec = prepare(repo, runs, run_id, model, options={"verify": CMD, "rounds": 2, "timeout_s": 60})
        assert spec.verify == CMD
        handle = backend.start(layout, spec)
        with Person(layout.mailbox, ["1"], questions=layout.questions):
            code = backend.wait(handle, 300)
    assert model.unmatched == [], [(r.prompt[-200:], r.user[-600:]) for r in model.unmatched]
    assert not [p.name for p in layout.workbench.iterdir() if p.name.startswith("verify-")], \
        "each copy was removed, as the run's user (10001), the folders its tests locked too"
    return code, json.loads(layout.exit_file.read_text()), read_events(layout), model


def test_the_worker_fixes_the_file_the_check_passes_and_the_verdict_is_achieved(backend, tmp_path: Path) -> None:  # noqa: F811
    code, done, events, model = _run(backend, tmp_path, "verify-fixed",
                                     lambda ws: starter_rules(ws, file="calc.py", content=FIXED))
    assert code == 0 and done["status"] == "succeeded", done
    assert [s["step"] for s in done["steps"]] == ["确认需求", "设定目标", "工作", "工作·判定#1"]
    checks = [e for e in events if e["kind"] == "verify"]
    assert [(c["text"], c["payload"]["exit_code"], c["payload"]["passed"]) for c in checks] == \
        [(f"verify `{CMD}` exited 0", 0, True)]
    assert "Ran 2 tests" in checks[0]["payload"]["tail"] and checks[0]["payload"]["tail"].endswith("OK")
    assert checks[0]["step"] == "工作"
    took = checks[0]["payload"]
    print(f"\nverify in the container: copy {took['copy_s']:.2f}s, python3 -m unittest {took['seconds']:.2f}s")
    judged = [r for r in model.conversation if "第 1 轮工作结束了" in r.prompt]
    assert judged and f"verify `{CMD}` exited 0" in judged[0].prompt, "the exit code is the judge's evidence"


def test_with_the_fix_withheld_the_judges_yes_is_not_achieved(backend, tmp_path: Path) -> None:  # noqa: F811
    def rules(ws: Path) -> list[Rule]:
        return [Rule(say("又核对了一遍,没问题"), system=LEAD, agent=False, user="exited 1"),
                *starter_rules(ws, file="notes.txt", content="looked at calc.py\n"),
                Rule(say(ACHIEVED), system=JUDGE, prompt="第 2 轮工作结束了")]

    code, done, events, model = _run(backend, tmp_path, "verify-withheld", rules)
    assert code == 1 and done["status"] == "failed" and "'工作'" in done["error"], done
    assert [s["step"] for s in done["steps"]] == ["确认需求", "设定目标", "工作", "工作·判定#1", "工作#round2",
                                                  "工作·判定#2"]
    checks = [e for e in events if e["kind"] == "verify"]
    assert [(c["payload"]["exit_code"], c["payload"]["passed"]) for c in checks] == [(1, False), (1, False)]
    assert "FAILED (failures=1)" in checks[0]["payload"]["tail"]
    judged = [r for r in model.conversation if "轮工作结束了" in r.prompt and "<检查>" in r.prompt]
    assert len(judged) == 2, "the judge was asked both rounds, and said 达成 both times"
    back = next(r for r in model.conversation if "exited 1" in r.user and "你是协调者" in r.system)
    assert "FAILED (failures=1)" in back.user and "AssertionError: -1 != 5" in back.user, \
        "the failing tail went back to the work"

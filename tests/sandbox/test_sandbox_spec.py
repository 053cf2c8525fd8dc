"""RunSpec: options are checked against starter_flow's own signature; the sandbox's own choices are not a client's."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import msgspec
import pytest

from flower.workflow import starter_flow
from sandbox.layout import RunLayout
from sandbox.spec import RUN_OPTIONS, RunSpec, SpecError, allowed_options, read_spec, write_spec


def test_options_follow_starter_flows_signature() -> None:
    kw = {n for n, p in inspect.signature(starter_flow).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert set(allowed_options()) == (kw - {"workspace", "run_dir"}) | set(RUN_OPTIONS)
    assert not set(RUN_OPTIONS) & kw, "a sandbox option never shadows one of the flow's"
    assert {"rounds", "goal", "judge_can_run", "clarify_only", "max_asks", "timeout_s", "instructions", "isolate",
            "new"} <= set(allowed_options())


def test_a_valid_spec_converts_its_options() -> None:
    spec = RunSpec("r1", "team-a", "做个东西", options={"rounds": 2, "timeout_s": 5, "max_asks": None, "goal": False,
                                                       "isolate": True, "instructions": "简短"}, env={"TZ": "UTC"})
    assert spec.options == {"rounds": 2, "timeout_s": 5.0, "max_asks": None, "goal": False, "isolate": True,
                            "instructions": "简短"}
    assert isinstance(spec.options["timeout_s"], float)


@pytest.mark.parametrize(("options", "message"), [
    ({"workspace": "/etc"}, "cannot be set by a client: the workspace"),
    ({"run_dir": "/tmp"}, "cannot be set by a client: the run dir"),
    ({"ask": "x"}, "cannot be set by a client"),
    ({"bogus": 1}, "unknown option 'bogus': allowed are"),
    ({"rounds": "3"}, "option 'rounds': Expected `int`, got `str`"),
    ({"rounds": True}, "Expected `int`, got `bool`"),
    ({"goal": 1}, "Expected `bool`, got `int`"),
    ({"rounds": 0}, "from 1 to 100 rounds"),
    ({"rounds": 10**30}, "from 1 to 100 rounds"),
    ({"max_asks": -1}, "from 0 to 1000"),
    ({"timeout_s": -1}, "from 0 to 604800 seconds"),
    ({"timeout_s": 1e300}, "from 0 to 604800 seconds"),
    ({"instructions": [[[[[[[[[["deep"]]]]]]]]]]}, "nest deeper than 8"),
    ({"isolate": False}, "the run's git worktree is its isolation"),
    ({"brief_name": "../../etc/passwd"}, "plain file name"),
    ({"verify": 1}, "option 'verify': Expected `str`, got `int`"),
    ({"verify": "  "}, "option 'verify' must be a shell command"),
    ({"verify": "x" * 4001}, "of 1 to 4000 characters"),
    ({"verify": "a\0b"}, "without NUL"),
])
def test_bad_options_are_refused_with_the_reason(options: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)").replace("`", "`")):
        RunSpec("r1", "t", "x", options=options)


@pytest.mark.parametrize(("env", "message"), [
    ({"ANTHROPIC_API_KEY": "sk"}, "is a credential"),
    ({"CLAUDE_CODE_OAUTH_TOKEN": "t"}, "is a credential"),
    ({"FLOWER_ENV": "/x"}, "set by the sandbox"),
    ({"HOME": "/root"}, "set by the sandbox"),
    ({"lower": "x"}, "env key"),
    ({"OK": "two\nlines"}, "one line"),
])
def test_env_extras_are_not_for_credentials(env: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        RunSpec("r1", "t", "x", env=env)


@pytest.mark.parametrize("run_id", ["../x", "X", ""])
def test_a_bad_run_id_is_a_spec_error(run_id: str) -> None:
    with pytest.raises(SpecError, match="run id"):
        RunSpec(run_id, "t", "x")


def test_an_empty_tenant_is_refused() -> None:
    with pytest.raises(SpecError, match="tenant"):
        RunSpec("r1", "", "x")


def test_write_and_read_back(tmp_path: Path) -> None:
    lay = RunLayout(tmp_path, "r1", "repo")
    spec = RunSpec("r1", "team-a", "做个东西", options={"rounds": 1}, env={"TZ": "UTC"})
    path = write_spec(lay, spec)
    assert path == lay.spec_file
    back = read_spec(path)
    assert back == msgspec.structs.replace(spec, repo_name="repo")
    assert json.loads(path.read_text())["repo_name"] == "repo"


def test_write_refuses_another_runs_spec(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="spec is for run 'r2'"):
        write_spec(RunLayout(tmp_path, "r1", "repo"), RunSpec("r2", "t", "x"))
    with pytest.raises(SpecError, match="names repository 'other'"):
        write_spec(RunLayout(tmp_path, "r1", "repo"), RunSpec("r1", "t", "x", repo_name="other"))


def test_reading_a_bad_spec_says_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read the run spec"):
        read_spec(tmp_path / "missing.json")
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(SpecError, match="is not JSON"):
        read_spec(tmp_path / "a.json")
    (tmp_path / "b.json").write_text(json.dumps({"run_id": "r1", "tenant": "t", "ask": "x", "options": {"nope": 1}}))
    with pytest.raises(SpecError, match="unknown option 'nope'"):
        read_spec(tmp_path / "b.json")
    (tmp_path / "c.json").write_text(json.dumps({"run_id": "r1", "tenant": "t"}))
    with pytest.raises(SpecError, match="missing required field `ask`"):
        read_spec(tmp_path / "c.json")


def test_the_asks_verify_wins_over_the_tenants_and_an_old_spec_has_none(tmp_path: Path) -> None:
    assert RunSpec("r1", "t", "x", verify="make test").verify == "make test"
    spec = RunSpec("r1", "t", "x", options={"verify": "pytest -q", "rounds": 2}, verify="make test")
    assert spec.verify == "pytest -q" and spec.options == {"verify": "pytest -q", "rounds": 2}
    lay = RunLayout(tmp_path / "runs", "r1", "ws").ensure()
    write_spec(lay, spec)
    back = read_spec(lay.spec_file)
    assert (back.verify, back.verify_timeout_s) == ("pytest -q", 600.0)
    old = {k: v for k, v in json.loads(lay.spec_file.read_text()).items() if not k.startswith("verify")}
    old["options"] = {}
    lay.spec_file.write_text(json.dumps(old))
    assert read_spec(lay.spec_file).verify is None, "a spec written before verify existed reads as no check"
    with pytest.raises(SpecError, match="verify_timeout_s must be from 1 to 604800 seconds"):
        RunSpec("r1", "t", "x", verify="true", verify_timeout_s=0)
    with pytest.raises(SpecError, match="verify must be a shell command"):
        RunSpec("r1", "t", "x", verify="")

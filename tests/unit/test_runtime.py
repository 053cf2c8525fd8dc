"""Runtime construction and its pure decisions (no CLI is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flower.core.runtime import Runtime


def test_missing_credentials_leave_no_folders_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    with pytest.raises(RuntimeError, match="No Anthropic credentials"):
        Runtime(workspace=ws, run_dir=runs)
    assert not ws.exists() and not runs.exists()


def test_errors_have_one_root_and_keep_the_builtin_types_callers_catch(tmp_path: Path) -> None:
    from flower.core.credentials import check_credentials
    from flower.core.errors import ConfigError, CredentialsError, FlowerError, ManifestError, StepAbort, StepError
    from flower.core.manifest import read_rows
    from flower.store import PruningSessionStore, TrimmingSessionStore, TrimPolicy
    from flower.workflow import Step
    from flower.core.agent import AgentSpec, CompactPolicy

    with pytest.raises(CredentialsError) as creds:
        check_credentials(cwd=tmp_path, home=tmp_path, code_root=tmp_path)
    assert isinstance(creds.value, RuntimeError) and isinstance(creds.value, FlowerError)
    assert creds.value.looked[0] == "the process environment" and len(creds.value.looked) == 6
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(ManifestError) as bad:
        read_rows(tmp_path / "manifest.json")
    assert isinstance(bad.value, RuntimeError) and bad.value.path == tmp_path / "manifest.json"
    with pytest.raises(StepError) as step:
        Step("_x", AgentSpec("a", ""), "p")
    assert isinstance(step.value, ValueError) and step.value.step == "_x"
    with pytest.raises(ConfigError) as cfg:
        TrimmingSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(spill_dirname="/abs"))
    assert cfg.value.setting == "TrimPolicy.spill_dirname" and isinstance(cfg.value, ValueError)
    with pytest.raises(TypeError):  # prune= and ephemeral= are keyword-only
        PruningSessionStore(tmp_path / "s.db", tmp_path, None, TrimPolicy())  # type: ignore[misc]
    with pytest.raises(ConfigError):
        CompactPolicy("nope").env()
    assert issubclass(StepAbort, FlowerError)


# -- what next: every branch of the run loop, without the CLI -------------------------------------

from flower.core.agent import HandoffPolicy  # noqa: E402
from flower.core.outcome import (  # noqa: E402
    INTERRUPT_NOTE,
    Call,
    Continue,
    Done,
    Failed,
    Finish,
    HandOff,
    HandoffDue,
    Interrupted,
    Retry,
    outcome_of,
    what_next,
)
from flower.core.resilience import Resilience  # noqa: E402

FIRST = Call("do it", "sess-0", True, "msg-1")


def nxt(outcome, *, attempt: int = 1, last: str | None = "sess-1", retired: int = 0,
        res: Resilience | None = None, handoff: HandoffPolicy | None = None):
    return what_next(outcome, call=FIRST, attempt=attempt, last_session=last, retired=retired,
                     resilience=res or Resilience(), handoff=handoff or HandoffPolicy(window=100_000))


def test_outcomes_are_read_by_cause_then_success_then_overflow():
    base = dict(errors=[], session_id="s", words=None, handoff=True)
    assert outcome_of(ok=False, error="interrupted-by-human", stop="interrupt", **{**base, "words": "停"}) == \
        Interrupted("停", "s")
    assert outcome_of(ok=False, error="context-full-handoff", stop="handoff", **base) == \
        HandoffDue("s", "context-full-handoff")
    assert outcome_of(ok=True, error=None, stop=None, **base) == Done("s")
    assert outcome_of(ok=False, error="prompt is too long: 1200000 tokens", stop=None, **base) == \
        HandoffDue("s", "prompt is too long: 1200000 tokens")
    assert outcome_of(ok=False, error="prompt is too long", stop=None, **{**base, "handoff": False}) == \
        Failed("prompt is too long", "s", "unknown")
    assert outcome_of(ok=False, error="x", stop=None, **{**base, "errors": ["context length exceeded"]}) == \
        HandoffDue("s", "x")
    assert outcome_of(ok=False, error=None, stop=None, **{**base, "session_id": None}) == \
        Failed("unknown error", None, "unknown")
    assert outcome_of(ok=False, error="HTTP 529 overloaded", stop=None, **base).kind == "transient"
    assert outcome_of(ok=False, error="401 invalid api key", stop=None, **base).kind == "fatal"


def test_done_finishes():
    assert nxt(Done("s")) == Finish()


def test_an_interrupt_continues_the_same_session_with_the_words_and_is_not_counted():
    assert nxt(Interrupted("改用 B 方案", "sess-1"), attempt=6) == \
        Continue(Call("改用 B 方案" + INTERRUPT_NOTE, "sess-1", False, None))
    assert nxt(Interrupted("", None)) == Finish()  # nothing to continue


def test_a_full_context_hands_off_until_max_generations():
    assert nxt(HandoffDue("sess-1", "why"), attempt=6) == HandOff("sess-1", "why")
    stop = nxt(HandoffDue("sess-9", "why"), retired=8)
    assert isinstance(stop, Finish) and stop.error and "max_generations=8" in stop.error
    assert isinstance(nxt(HandoffDue("s", ""), retired=2, handoff=HandoffPolicy(max_generations=2)), Finish)


def test_a_failure_retries_resuming_the_last_session_or_the_same_call():
    transient = Failed("HTTP 529", "sess-1", "transient")
    assert nxt(transient) == Retry(Call(Resilience().resume_prompt, "sess-1"), 2, resumed=True)
    assert nxt(transient, last=None) == Retry(FIRST, 2, resumed=False)  # no session yet: send the same again
    assert nxt(transient, attempt=5) == Retry(Call(Resilience().resume_prompt, "sess-1"), 6, resumed=True)


def test_a_failure_finishes_when_retrying_cannot_help():
    assert nxt(Failed("HTTP 529", "s", "transient"), attempt=6) == Finish()  # max_attempts
    assert nxt(Failed("401", "s", "fatal")) == Finish()
    assert nxt(Failed("odd", "s", "unknown"), res=Resilience(retry_unknown=False)) == Finish()
    assert isinstance(nxt(Failed("odd", "s", "unknown")), Retry)
    assert nxt(Failed("HTTP 529", "s", "transient"), res=Resilience(enabled=False)) == Finish()


def test_observers_are_lists_and_see_every_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """on_attempt / on_result instead of subclassing: both lists, called once per run()."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-unit-not-real")
    rt = Runtime(workspace=tmp_path / "ws", run_dir=tmp_path / "runs")
    assert rt.on_attempt == [] and rt.on_result == []

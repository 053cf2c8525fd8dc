"""PruningSessionStore: old denials and API errors leave, interrupt residue is neutralized, orphans are
healed — and the replayed transcript stays a valid chain the CLI can resume."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from _transcripts import (
    STOP_TEXT,
    Entry,
    Transcript,
    Use,
    assert_valid_chain,
    bash,
    conversation,
    denied,
    tool_results,
    tool_use_ids,
)

from flower.store import EphemeralPolicy, PrunePolicy, PruningSessionStore, SqliteSessionStore, TrimPolicy, trim_report

KEY = {"project_key": "p", "session_id": "s"}
INTERRUPT = "[上一轮在此处被中断,该工具结果未产生]"
ORPHAN = "[这一步被打断了,没有结果。需要的话重做。]"


def _denials(n: int = 3, how: str = "hook") -> tuple[Transcript, list[Use], Use]:
    t = Transcript()
    refused = [denied(f"rm -rf build{i}", how) for i in range(n)]
    ok = bash("pytest -q", "3 passed")
    t.prompt("clean up and test")
    for i, d in enumerate(refused):
        t.reply(f"try {i}", d)
    t.reply("", ok)
    t.reply("done")
    t.end()
    return t, refused, ok


async def _load(tmp_path: Path, entries: list[Entry], db: str = "s.db",
                **prune: Any) -> tuple[list[Entry], PruningSessionStore]:
    store = PruningSessionStore(tmp_path / db, workspace=tmp_path, prune=PrunePolicy(**prune))
    await store.append(KEY, entries)  # type: ignore[arg-type]
    out = await store.load(KEY)  # type: ignore[arg-type]
    assert out is not None
    return out, store  # type: ignore[return-value]


def _texts(entries: list[Entry]) -> list[str]:
    return [b["text"] for e in entries if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "text"]


# -- denials ----------------------------------------------------------------------


async def test_keeps_newest_denials_only(tmp_path: Path) -> None:
    t, refused, ok = _denials(3)
    original = copy.deepcopy(t.entries)
    out, store = await _load(tmp_path, t.entries, keep_denials=1)
    ids = tool_use_ids(out)
    assert ids == [refused[2].id, ok.id]
    assert sorted(tool_results(out)) == sorted(ids)
    assert_valid_chain(out)
    assert _texts(out) == ["try 0", "try 1", "try 2", "done"]  # the text around a dropped call stays
    assert (store.denials_dropped, store.pruned) == (2, 4)  # 2 calls = 2 tool_use entries + 2 result entries
    assert trim_report(store) == "未裁剪"  # pruning is not trimming
    # the rows are untouched
    assert await SqliteSessionStore(tmp_path / "s.db").load(KEY) == original  # type: ignore[arg-type]


@pytest.mark.parametrize(("keep", "left"), [(0, 0), (2, 2), (5, 3)])
async def test_keep_denials(tmp_path: Path, keep: int, left: int) -> None:
    t, refused, _ = _denials(3)
    out, store = await _load(tmp_path, t.entries, keep_denials=keep)
    kept = [i for i in tool_use_ids(out) if i in {d.id for d in refused}]
    assert kept == [d.id for d in refused][len(refused) - left :]
    assert store.denials_dropped == 3 - left
    assert_valid_chain(out)


@pytest.mark.parametrize("how", ["hook", "rule", "not-granted"])
async def test_every_kind_of_refusal_the_cli_marks(tmp_path: Path, how: str) -> None:
    t, refused, ok = _denials(2, how)
    out, store = await _load(tmp_path, t.entries, keep_denials=0)
    assert tool_use_ids(out) == [ok.id] and store.denials_dropped == 2


async def test_plain_errors_and_unmarked_text_are_not_denials(tmp_path: Path) -> None:
    """Structure decides, never wording: a failed command informs; a denial-looking text without the marker stays."""
    t = Transcript()
    failed = bash("pytest", "Exit code 1\nFAILED test_a", error=True)
    lookalike = bash("rm x", "PreToolUse:Bash hook error: 协调者没有写权限。", error=True)  # no toolDenialKind
    t.prompt("go")
    t.reply("", failed)
    t.reply("", lookalike)
    t.end()
    out, store = await _load(tmp_path, t.entries, keep_denials=0)
    assert tool_use_ids(out) == [failed.id, lookalike.id]
    assert (store.denials_dropped, store.pruned) == (0, 0)


async def test_denials_that_ran_or_hold_a_persons_words_stay(tmp_path: Path) -> None:
    t = Transcript()
    after_run, persons = denied("rm a"), denied("rm b")
    t.prompt("go")
    t.reply("", after_run)
    t.reply("", persons)
    t.end()
    for e in t.entries:
        ids = [b.get("tool_use_id") for b in (e.get("message") or {}).get("content") or [] if isinstance(b, dict)]
        if after_run.id in ids:
            e["toolDenialAfterRun"] = True
        if persons.id in ids:
            e["holdsPersonsWords"] = True
    out, store = await _load(tmp_path, t.entries, keep_denials=0)
    assert tool_use_ids(out) == [after_run.id, persons.id] and store.denials_dropped == 0


async def test_parallel_call_keeps_its_sibling(tmp_path: Path) -> None:
    t = Transcript()
    first = denied("rm a")
    good = bash("pytest", "ok")
    bad = denied("rm b")
    last = denied("rm c")
    t.prompt("go")
    t.reply("both", good, bad)  # bad is the *last* block: the next reply hangs off its result
    t.reply("", first)
    t.reply("again", last)
    t.reply("done")
    t.end()
    out, _ = await _load(tmp_path, t.entries, keep_denials=1)
    assert set(tool_use_ids(out)) == {good.id, last.id}
    assert_valid_chain(out)


async def test_only_the_hit_block_leaves_a_multi_block_message(tmp_path: Path) -> None:
    """A writer that keeps one assistant message per entry: text, thinking and the sibling call stay."""
    t = Transcript()
    bad, good = denied("rm a"), bash("ls", "a")
    t.prompt("go")
    t.reply("", bad, good)
    t.reply("done")
    t.end()
    holders = [e for e in t.entries if e["type"] == "assistant" and e["message"]["content"][0]["type"] == "tool_use"]
    merged = holders[0]
    merged["message"]["content"] = [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                                    {"type": "text", "text": "two calls"},
                                    *[h["message"]["content"][0] for h in holders]]
    t.entries = [e for e in t.entries if e is not holders[1]]
    for e in t.entries:
        for f in ("parentUuid", "sourceToolAssistantUUID", "leafUuid"):
            if e.get(f) == holders[1]["uuid"]:
                e[f] = merged["uuid"]
    out, store = await _load(tmp_path, t.entries, keep_denials=0)
    (kept,) = [e for e in out if e.get("uuid") == merged["uuid"]]
    assert [b["type"] for b in kept["message"]["content"]] == ["thinking", "text", "tool_use"]
    assert tool_use_ids(out) == [good.id] and sorted(tool_results(out)) == [good.id]
    assert store.pruned == 1  # only the denial's result entry; the message entry stays
    assert_valid_chain(out)


async def test_removal_in_the_middle_keeps_the_history_before_it(tmp_path: Path) -> None:
    t = Transcript()
    first = t.prompt("the original task")
    t.reply("", bash("make", "built"))
    t.reply("", denied("rm -rf /tmp/x"))
    t.reply("", bash("pytest", "ok"))
    t.prompt("next")
    t.reply("fine")
    t.end()
    out, _ = await _load(tmp_path, t.entries, keep_denials=0)
    chain = conversation(out)
    assert chain[0] is not None and chain[0]["uuid"] == first["uuid"]
    assert len(chain) == len([e for e in out if "uuid" in e])  # nothing fell off the chain


async def test_leaf_and_meta_entries_follow(tmp_path: Path) -> None:
    t = Transcript()
    d1, d2 = denied("rm x"), denied("rm y")
    t.prompt("go")
    t.reply("", d1)
    t._chain(t._base(type="attachment", attachment={"type": "hook_additional_context", "toolUseID": d1.id,
                                                    "content": ["denied by guard"]}))
    t.reply("", d2)  # the session ends on a denial: leafUuid points at a dropped result
    t.end()
    out, _ = await _load(tmp_path, t.entries, keep_denials=0)
    assert tool_use_ids(out) == []
    assert not any((e.get("attachment") or {}).get("toolUseID") == d1.id for e in out)
    assert_valid_chain(out)


async def test_denials_without_their_call_are_left_alone(tmp_path: Path) -> None:
    """A result whose tool_use is not in this transcript (e.g. before a compaction) is not counted nor pruned."""
    t, refused, _ = _denials(2)
    holder = next(e for e in t.entries if e["type"] == "assistant"
                  and e["message"]["content"][0].get("id") == refused[0].id)
    holder["message"]["content"] = [{"type": "text", "text": "(compacted)"}]
    out, store = await _load(tmp_path, t.entries, keep_denials=0, heal_orphans=False)
    assert store.denials_dropped == 1
    assert refused[0].id in tool_results(out)


# -- API errors ------------------------------------------------------------------


async def test_api_errors_leave_and_the_chain_closes(tmp_path: Path) -> None:
    t = Transcript()
    t.prompt("go")
    t.reply("", bash("make", "ok"))
    err = t.api_error()
    t.prompt("try again")
    t.reply("done")
    t.end()
    out, store = await _load(tmp_path, t.entries)
    assert err["uuid"] not in {e.get("uuid") for e in out}
    assert not any("API Error" in str(e.get("message")) for e in out)
    assert (store.api_errors_dropped, store.pruned) == (1, 1)
    assert_valid_chain(out)
    assert [e["message"]["content"] for e in conversation(out) if e["type"] == "user"
            and isinstance(e["message"]["content"], str)] == ["go", "try again"]

    kept, store = await _load(tmp_path, copy.deepcopy(t.entries), "off.db", drop_api_errors=False)
    assert err["uuid"] in {e.get("uuid") for e in kept} and store.api_errors_dropped == 0


async def test_other_synthetic_placeholders_stay(tmp_path: Path) -> None:
    """The CLI's "No response requested." (model <synthetic>, no error) is not an API error."""
    t = Transcript()
    t.prompt("go")
    t.reply("", bash("make", "ok"))
    placeholder = t.api_error("No response requested.")
    for k in ("isApiErrorMessage", "error", "apiErrorStatus"):
        placeholder.pop(k)
    t.prompt("next")
    t.reply("done")
    t.end()
    kept, store = await _load(tmp_path, t.entries)
    assert placeholder["uuid"] in {e.get("uuid") for e in kept} and store.api_errors_dropped == 0


# -- interrupt residue -------------------------------------------------------------


def _interrupted() -> tuple[Transcript, Use, Use, Use]:
    t = Transcript()
    stopped = bash("sleep 60", STOP_TEXT, error=True)
    stopped.mark = "interrupt"
    cut = bash("make long", "[Tool call interrupted: the session ended before this call's result was recorded.]",
               error=True)
    cut.mark = "cut-off"
    refused = denied("git push", "not-granted")
    t.prompt("go")
    t.reply("", stopped)
    t.reply("", cut)
    t.reply("", refused)
    t.end()
    return t, stopped, cut, refused


async def test_interrupt_residue_is_neutralized(tmp_path: Path) -> None:
    t, stopped, cut, refused = _interrupted()
    out, store = await _load(tmp_path, t.entries, keep_denials=5)
    results = tool_results(out)
    assert results[stopped.id]["content"] == INTERRUPT and results[cut.id]["content"] == INTERRUPT
    assert results[stopped.id]["is_error"] is True  # only the body changes; block and entry stay
    assert results[refused.id]["content"] == refused.output  # a refusal (it has a permissionDecision) is not residue
    assert store.interrupts_neutralized == 2 and store.pruned == 0
    assert "STOP what you are doing" not in str([e.get("message") for e in out])  # what the model is sent


async def test_neutralize_can_be_turned_off_and_text_changed(tmp_path: Path) -> None:
    t, stopped, _, _ = _interrupted()
    out, store = await _load(tmp_path, t.entries, neutralize_interrupts=False)
    assert tool_results(out)[stopped.id]["content"] == STOP_TEXT and store.interrupts_neutralized == 0
    out, _ = await _load(tmp_path, copy.deepcopy(t.entries), "other.db", interrupt_text="(interrupted)")
    assert tool_results(out)[stopped.id]["content"] == "(interrupted)"


# -- orphans ----------------------------------------------------------------------


@pytest.mark.parametrize("orphan_at", [0, 1])
async def test_orphans_are_healed_right_after_their_message(tmp_path: Path, orphan_at: int) -> None:
    """The process stopped between a parallel call and its result: the call gets a synthetic result."""
    t = Transcript()
    t.prompt("go")
    uses = [bash("sleep 60", ""), bash("ls", "a")]
    uses[orphan_at].orphan = True
    t.reply("working", *uses)
    t.end()
    orphan = uses[orphan_at]
    before = copy.deepcopy(t.entries)
    out, store = await _load(tmp_path, t.entries)
    assert store.orphans_healed == 1
    assert tool_results(out)[orphan.id] == {"type": "tool_result", "tool_use_id": orphan.id, "content": ORPHAN,
                                            "is_error": True}
    assert_valid_chain(out)
    # inserted right after the message's last entry; the chain runs through it to the leaf
    last_assistant = max(i for i, e in enumerate(out) if e["type"] == "assistant")
    healed = out[last_assistant + 1]
    assert healed["parentUuid"] == out[last_assistant]["uuid"]
    holder = next(e for e in out if e["type"] == "assistant" and e["message"]["content"][0].get("id") == orphan.id)
    assert healed["sourceToolAssistantUUID"] == holder["uuid"]
    by_uuid, u, path = {e["uuid"]: e for e in out if "uuid" in e}, healed["uuid"], []
    while u is not None:  # the healed entry hangs off the chain, down to the prompt
        path.append(by_uuid[u]["type"])
        u = by_uuid[u]["parentUuid"]
    assert path[0] == "user" and path[1] == "assistant" and path[-1] == "user"
    if orphan_at == 0:  # the sibling's result hung off the message's last entry: it now follows the healed one
        assert healed["uuid"] in {e["uuid"] for e in conversation(out)}
    assert all(healed.get(k) == holder.get(k) for k in ("sessionId", "cwd", "version", "isSidechain"))
    # the same uuid on every load (a resume_at taken from one load still finds it in the next)
    again, _ = await _load(tmp_path, before, "again.db")
    assert healed["uuid"] in {e.get("uuid") for e in again}


async def test_orphans_left_when_healing_is_off(tmp_path: Path) -> None:
    t = Transcript()
    t.prompt("go")
    lost = bash("sleep 60")
    lost.orphan = True
    t.reply("", lost)
    t.end()
    out, store = await _load(tmp_path, t.entries, heal_orphans=False, orphan_text="x")
    assert lost.id in tool_use_ids(out) and lost.id not in tool_results(out) and store.orphans_healed == 0


# -- the store ---------------------------------------------------------------------


async def test_prune_after_trim_and_counters_per_load(tmp_path: Path) -> None:
    t, refused, _ = _denials(3)
    for i in range(25):
        t.prompt(f"p{i}")
        t.reply("", bash(f"make step{i}", "m" * 2500))
    t.end()
    store = PruningSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(keep_recent=2), prune=PrunePolicy(1))
    await store.append(KEY, t.entries)  # type: ignore[arg-type]
    out = await store.load(KEY)  # type: ignore[arg-type]
    assert [i for i in tool_use_ids(out) if i in {d.id for d in refused}] == [refused[2].id]
    assert store.denials_dropped == 2 and store.last_report["cleared"] == 23
    assert trim_report(store).startswith("裁掉 23 个工具结果(保留最近 2 个)")
    store.prune_policy = PrunePolicy(keep_denials=3)
    await store.load(KEY)  # type: ignore[arg-type]
    assert store.denials_dropped == 0 and store.pruned == 0


def test_prune_and_ephemeral_are_keyword_only(tmp_path: Path) -> None:
    """The 4th parameter differs from TrimmingSessionStore's (prune vs ephemeral): by position it is refused."""
    store = PruningSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(keep_recent=3),
                                prune=PrunePolicy(keep_denials=0), ephemeral=EphemeralPolicy(keep_recent=2))
    assert (store.policy.keep_recent, store.prune_policy.keep_denials, store.ephemeral.keep_recent) == (3, 0, 2)
    for fourth in (EphemeralPolicy(), PrunePolicy()):
        with pytest.raises(TypeError, match="positional"):
            PruningSessionStore(tmp_path / "s.db", tmp_path, None, fourth)  # type: ignore[misc]


def test_negative_keep_denials_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="use 0"):
        PruningSessionStore(tmp_path / "s.db", tmp_path, prune=PrunePolicy(keep_denials=-1))


def test_policy_defaults() -> None:
    p = PrunePolicy()
    assert (p.drop_api_errors, p.neutralize_interrupts, p.heal_orphans, p.keep_denials) == (True, True, True, 1)
    assert p.interrupt_text == INTERRUPT and p.orphan_text == ORPHAN


async def test_a_call_answered_in_a_meta_entry_is_not_an_orphan(tmp_path: Path) -> None:
    t = Transcript()
    t.prompt("go")
    u = bash("ls", "a")
    t.reply("", u)
    t.end()
    (result,) = [e for e in t.entries if e["type"] == "user" and isinstance(e["message"]["content"], list)]
    result["isMeta"] = True
    out, store = await _load(tmp_path, t.entries)
    assert store.orphans_healed == 0 and len(out) == len(t.entries)

"""What a run writes, decoded as the service reads it: known fields only, bounded, wrong types refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.records import (TEXT_MAX, AuditClaim, Event, RecordError, decode_audit, decode_event, decode_question,
                             read_exit_record)


def test_an_event_keeps_our_fields_only_and_bounds_them() -> None:
    ev = decode_event(json.dumps({"kind": "text", "text": "x" * (TEXT_MAX + 10), "seq": 7, "event": "forged",
                                  "tool": "T\n" * 300, "payload": {"a": 1}}).encode())
    assert isinstance(ev, Event) and not hasattr(ev, "seq") and not hasattr(ev, "event")
    assert len(ev.text) == TEXT_MAX and "\n" not in ev.tool and len(ev.tool) <= 200 and ev.payload == {"a": 1}
    assert decode_event(b"  \n") is None
    for raw in (b"[1, 2]", b"not json", b'{"kind": "step", "text": 3}', b'{"kind": "Bad Kind"}',
                b'{"kind": "audit", "payload": []}', b"[" * 100_000):
        got = decode_event(raw)
        assert got is not None and got.kind == "unparsed", raw[:40]


def test_an_audit_claim_is_our_fields_and_an_unknown_kind_is_no_kind() -> None:
    ev = Event(kind="audit", text="deny", payload={"source": "wire", "level": "x", "tool": "Write", "size": 3,
                                                   "reason": "a\nb" * 400})
    kind, claim = decode_audit(ev)
    assert kind == "deny" and set(claim.fields()) == {"tool", "size", "reason"} and len(claim.reason or "") <= 500
    assert decode_audit(Event(kind="audit", text="\x1b]52;c;x\x07"))[0] is None
    assert decode_audit(Event(kind="audit", text="spill", payload={"size": "big"})) == ("spill", AuditClaim())


def test_exit_and_question_records(tmp_path: Path) -> None:
    (tmp_path / "outbox").mkdir()
    exit_file = tmp_path / "outbox" / "exit.json"
    assert read_exit_record(tmp_path) is None and read_exit_record(tmp_path / "absent") is None
    exit_file.write_text(json.dumps({"status": "succeeded", "cost_usd": 0.5, "steps": [1], "error": "a\n" * 2000}))
    rec = read_exit_record(tmp_path)
    assert rec is not None and rec.status == "succeeded" and rec.cost_usd == 0.5 and len(rec.error or "") <= 2000
    for bad in ({"status": "won"}, {"status": "failed", "cost_usd": "free"}, [1]):
        exit_file.write_text(json.dumps(bad))
        with pytest.raises(RecordError, match="not valid"):
            read_exit_record(tmp_path)
    exit_file.unlink()
    exit_file.symlink_to("/etc/passwd")
    assert read_exit_record(tmp_path) is None, "a symlink is no exit.json the service takes"
    q = decode_question(json.dumps({"id": "q1", "question": "?", "options": [str(i) for i in range(80)],
                                    "timeout_s": 5, "owner": "x"}).encode())
    assert q is not None and len(q.options) == 50 and q.timeout_s == 5
    assert decode_question(b'{"id": "q", "timeout_s": true}') is None and decode_question(b'{"question": "?"}') is None

"""Reading a run's events.jsonl: numbered lines, the same numbering for every reader.

An event's number (``seq``, 1-based) is its line number among *complete* lines (ending in a
newline): the scheduler tailing from its stored byte offset and an SSE stream replaying from
the start count alike, so a client's ``?after=N`` means the same thing to both. A half-written last
line is left for the next read. Lines that are not a JSON object still take their number
and surface as ``{"kind": "unparsed"}`` so nothing silently shifts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["parse_line", "read_new", "MAX_CHUNK", "MAX_LINE"]

MAX_CHUNK = 1024 * 1024  # bytes read per pass; the rest comes on the next pass
MAX_LINE = 64 * 1024 * 1024  # a longer event line is skipped (counted, not parsed)


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """One line → an event dict; None for a blank line (it still counts)."""
    text = raw.strip()
    if not text:
        return None
    try:
        ev = json.loads(text)
    except ValueError:
        ev = None
    if not isinstance(ev, dict):
        return {"kind": "unparsed", "text": text[:500].decode("utf-8", "replace")}
    return ev


def read_new(path: Path, offset: int, seq: int, *, limit: int = MAX_CHUNK
             ) -> tuple[list[tuple[int, dict[str, Any]]], int, int]:
    """Complete lines after byte ``offset`` (about ``limit`` bytes of them) → ([(seq, event)], new offset, new seq).

    A single line longer than ``limit`` is read whole, up to MAX_LINE; a longer one counts as one
    ``unparsed`` event and is skipped, so the reader never stalls on it.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return [], offset, seq
    with f:
        f.seek(offset)
        data = f.read(limit)
        end = data.rfind(b"\n")
        if end < 0 and len(data) == limit:  # one line longer than limit: find where it ends
            pos = offset + len(data)
            while True:
                chunk = f.read(limit)
                if not chunk:
                    return [], offset, seq  # still being written
                i = chunk.find(b"\n")
                if i >= 0:
                    line_end = pos + i + 1
                    break
                pos += len(chunk)
            if line_end - offset > MAX_LINE:
                skipped = {"kind": "unparsed", "text": f"an event line of {line_end - offset} bytes was skipped"}
                return [(seq + 1, skipped)], line_end, seq + 1
            f.seek(offset)
            data = f.read(line_end - offset)
            end = len(data) - 1
    if end < 0:
        return [], offset, seq
    out: list[tuple[int, dict[str, Any]]] = []
    for line in data[: end + 1].split(b"\n")[:-1]:
        seq += 1
        ev = parse_line(line)
        if ev is not None:
            out.append((seq, ev))
    return out, offset + end + 1, seq

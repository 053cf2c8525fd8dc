"""Reading a run's events.jsonl: numbered lines, the same numbering for every reader, read as hostile data.

An event's number (``seq``, 1-based) is its line number among *complete* lines (ending in a
newline): the scheduler tailing from its stored byte offset and an SSE stream replaying from
the start count alike, so a client's ``?after=N`` means the same thing to both. A half-written last
line is left for the next read. Lines that are not a JSON object still take their number
and surface as ``{"kind": "unparsed"}`` so nothing silently shifts.

The file is the run's: it is opened through ``sandbox.runfiles`` (never a symlink, FIFO or device), every
pass reads at most ``MAX_CHUNK`` bytes, a line longer than ``MAX_LINE`` is cut into ``MAX_LINE`` pieces
(each one ``unparsed`` event), and nothing past ``MAX_FILE`` is read at all — a 10 GB sparse file or a
100 MB line costs the service bounded memory and time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sandbox.runfiles import open_file

__all__ = ["parse_line", "read_new", "MAX_CHUNK", "MAX_LINE", "MAX_FILE", "EVENTS"]

EVENTS = "outbox/events.jsonl"
MAX_CHUNK = 1024 * 1024  # bytes read per pass; the rest comes on the next pass
MAX_LINE = 1024 * 1024  # a longer line is cut into pieces of this size
MAX_FILE = 256 * 1024 * 1024  # nothing past this offset is read


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """One line → an event dict; None for a blank line (it still counts)."""
    text = raw.strip()
    if not text:
        return None
    try:
        ev = json.loads(text)
    except (ValueError, RecursionError):
        ev = None
    if not isinstance(ev, dict):
        return {"kind": "unparsed", "text": text[:500].decode("utf-8", "replace")}
    return ev


def read_new(folder: Path, offset: int, seq: int, *, limit: int = MAX_CHUNK
             ) -> tuple[list[tuple[int, dict[str, Any]]], int, int]:
    """Complete lines of ``<folder>/outbox/events.jsonl`` after byte ``offset`` (about ``limit`` bytes of them)
    → ([(seq, event)], new offset, new seq). A missing or non-regular file reads as nothing new."""
    if offset >= MAX_FILE:
        return [], offset, seq
    try:
        with open_file(folder, EVENTS) as fd:
            data = os.pread(fd, min(limit, MAX_FILE - offset), offset)
            if b"\n" not in data and len(data) == limit < MAX_LINE:  # one line longer than a pass: find its end
                data = os.pread(fd, min(MAX_LINE, MAX_FILE - offset), offset)
    except OSError:  # missing, a symlink, a FIFO, a device: nothing to read
        return [], offset, seq
    end = data.rfind(b"\n")
    if end < 0:
        if len(data) < MAX_LINE:
            return [], offset, seq  # still being written
        piece = {"kind": "unparsed", "text": f"an event line longer than {MAX_LINE} bytes was cut here"}
        return [(seq + 1, piece)], offset + len(data), seq + 1
    out: list[tuple[int, dict[str, Any]]] = []
    for line in data[: end + 1].split(b"\n")[:-1]:
        seq += 1
        ev = parse_line(line)
        if ev is not None:
            out.append((seq, ev))
    return out, offset + end + 1, seq

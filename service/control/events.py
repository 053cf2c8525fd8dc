"""Reading a run's events.jsonl: numbered lines, the same numbering for every reader, read as hostile data.

An event's number (``seq``, 1-based) is its line number among *complete* lines (ending in a
newline): the scheduler tailing from its stored byte offset and an SSE stream replaying from
the start count alike, so a client's ``?after=N`` means the same thing to both. A half-written last
line is left for the next read. Lines that are not a JSON object still take their number
and surface as ``unparsed`` events so nothing silently shifts. Lines are decoded into
``sandbox.records.Event`` (known fields, bounded sizes): nothing a run writes becomes a field of ours.

The file is the run's: it is opened through ``sandbox.runfiles`` (never a symlink, FIFO or device), every
pass reads at most ``MAX_CHUNK`` bytes, a line longer than ``MAX_LINE`` is cut into ``MAX_LINE`` pieces
(each one ``unparsed`` event), and nothing past ``MAX_FILE`` is read at all — a 10 GB sparse file or a
100 MB line costs the service bounded memory and time.

``replay`` is what one SSE stream serves: the file from ``after`` on, then the live events the scheduler
fans out, back to the file whenever the live queue fell behind, and how the run ended last.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.records import Event, decode_event, unparsed
from sandbox.runfiles import open_file

from ..clock import SYSTEM, Clock

__all__ = ["read_new", "replay", "Numbered", "KeepAlive", "Ended", "END", "MAX_CHUNK", "MAX_LINE",
           "MAX_FILE", "EVENTS"]

EVENTS = "outbox/events.jsonl"
MAX_CHUNK = 1024 * 1024  # bytes read per pass; the rest comes on the next pass
MAX_LINE = 1024 * 1024  # a longer line is cut into pieces of this size
MAX_FILE = 256 * 1024 * 1024  # nothing past this offset is read


def read_new(folder: Path, offset: int, seq: int, *, limit: int = MAX_CHUNK
             ) -> tuple[list[tuple[int, Event]], int, int]:
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
        piece = unparsed(f"an event line longer than {MAX_LINE} bytes was cut here")
        return [(seq + 1, piece)], offset + len(data), seq + 1
    out: list[tuple[int, Event]] = []
    for line in data[: end + 1].split(b"\n")[:-1]:
        seq += 1
        ev = decode_event(line)
        if ev is not None:
            out.append((seq, ev))
    return out, offset + end + 1, seq


# -- one stream's replay ---------------------------------------------------------------------
END = object()  # what a subscriber's queue gets when its run has ended (or the service stops)


@dataclass(frozen=True)
class Numbered:
    """One event line and its number."""
    seq: int
    event: Event


@dataclass(frozen=True)
class KeepAlive:
    """Nothing happened for a while: a comment keeps proxies from closing the stream."""


@dataclass(frozen=True)
class Ended:
    """The last thing a stream says: how the run ended and the number of its last event."""
    status: str
    events: int


async def replay(folder: Path, after: int, queue: asyncio.Queue[Any], over: Callable[[], str | None],
                 *, keepalive_s: float = 15.0, poll_s: float = 0.5,
                 clock: Clock = SYSTEM) -> AsyncIterator[Numbered | KeepAlive | Ended]:
    """Everything in ``<folder>``'s events.jsonl past ``after``, then what arrives on ``queue`` (subscribed
    before this starts, so nothing falls between the two), then ``Ended``.

    ``over()`` is None while the run is live, then its final status.
    The file is the truth; the queue only says "more": a gap in it (a slow client's queue overflowed)
    sends the stream back to the file, and so does every ``poll_s`` without news — a run another replica follows
    publishes nothing on this one's queue, and its stream is the file's."""
    sent = after
    offset, read = 0, 0  # how far this stream has read the file: bytes, events
    quiet_since = clock.monotonic()

    async def from_file() -> AsyncIterator[Numbered]:
        """A chunk (``MAX_CHUNK``) at a time: a run that wrote 256 MB of events costs a stream 1 MB, not all."""
        nonlocal offset, read
        while True:
            evs, new_offset, read = await asyncio.to_thread(read_new, folder, offset, read)
            for n, e in evs:
                if n > sent:
                    yield Numbered(n, e)
            if new_offset == offset:
                return
            offset = new_offset

    while True:
        async for item in from_file():
            yield item
            sent, quiet_since = item.seq, clock.monotonic()
        if over() is not None:
            break
        got: Any = None
        while True:
            try:  # not wait_for: on 3.11 a cancel that meets an event is swallowed with the event
                async with asyncio.timeout(poll_s):
                    got = await queue.get()
            except TimeoutError:
                if clock.monotonic() - quiet_since >= keepalive_s:
                    yield KeepAlive()
                    quiet_since = clock.monotonic()
                break  # the file again
            if got is END:
                break
            seq, ev = got
            if seq <= sent:
                continue
            if seq > sent + 1:
                break
            yield Numbered(seq, ev)
            sent, quiet_since = seq, clock.monotonic()
        if got is END:  # the run ended, or the service is stopping: the rest is in the file
            break
    async for item in from_file():
        yield item
        sent = item.seq
    yield Ended(over() or "unknown", sent)

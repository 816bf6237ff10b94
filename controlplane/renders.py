"""Reads whose answer grows with participants x limits, rendered on the event loop a step at a time, and at most so
often: Prometheus's ``/metrics`` (``controlplane.scrapes``) and the dashboard's big ``/v1/state/*`` views.

Why on the loop
---------------
A plain endpoint runs on a worker thread beside the event loop that answers reports. Python's threads share the
interpreter lock: the loop gives it up at every socket call and waits for it back each time (up to the switch
interval, 5 ms), so while a long render ran on a thread the reports queued behind it. At 1,000 participants of 100
shared limits a scrape (1.2-1.6 s) took the reports' p99 from 36 ms to 723 ms, and the dashboard's live pages,
reading ``/v1/state/buckets`` (21.7 MB) and ``/v1/state/shared`` (28.6 MB) every 2 s, to 1.2 s. Here a render is
a ``Pieces``: an iterator of bytes with ``None`` where it pauses, and ``Renders.answer`` runs it on the loop,
sending each piece as it comes and letting the loop answer what came in between.

At most so often
----------------
A render's CPU grows with the state, and its readers poll at their own pace (Prometheus every 5 s, a dashboard page
every 2 s), so rendering is held to ``share`` of a core for all the keys of one ``Renders`` together: a render that
took ``cpu_s`` of the loop's CPU (``cpu_clock``, the thread's own, summed over its steps) is handed out again, as it
was, until ``started_s + costly_cpu_s / share``, where ``costly_cpu_s`` sums the last render's CPU of every key read
in the last ``FORGET_AFTER_S``. With one key that is ``cpu_s / share`` -- a scrape that took 0.7 s is rendered anew
every 7 s at most; with two (buckets at 0.5 s and shared at 1.1 s, as at 1,000 x 100) each is rendered anew every 16
s at most, and the two together keep to the share however the reads interleave (a budget taken by whoever came first
would starve the key a page always reads second). A render under ``FRESH_BELOW_CPU_S`` (50 ms: the demo's take a
few) is never reused, nor counted: a read right after a report shows it. A reused answer says how old it is
(``Answer.age_s``; the endpoints send it as HTTP's ``Age`` header).

Not thread-safe: the renders are answered on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from dataclasses import dataclass

from fastapi.responses import StreamingResponse

__all__ = ["Renders", "Rendered", "Answer", "Pieces", "streamed", "FRESH_BELOW_CPU_S", "SEND_BYTES", "FORGET_AFTER_S"]

Pieces = Iterator[bytes | None]   # a render's text, piece by piece; None where it pauses for the loop
FRESH_BELOW_CPU_S = 0.05    # a render that took less is never handed out again
SEND_BYTES = 256 * 1024     # a reused render goes out in chunks of about this size (each gzipped in turn)
FORGET_AFTER_S = 60.0       # a key nobody read for this long no longer counts, and its render is dropped


@dataclass(frozen=True)
class Rendered:
    started_s: float   # on the monotonic clock
    cpu_s: float       # the loop's CPU for the render's own steps
    # the text in the pieces it was rendered in: joined at the render's end, a scrape of 13.5 MB (300 participants of
    # 1,000 limits) held the loop 40-50 ms in one go, where the reports' p99 was 25 ms
    pieces: tuple[bytes, ...]

    @property
    def text(self) -> bytes:
        return b"".join(self.pieces)


@dataclass(frozen=True)
class Answer:
    """One read's answer: ``age_s`` is how long ago the render it hands out began (None: rendered for it)."""

    age_s: float | None
    body: AsyncIterator[bytes]

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.body


class Renders:
    """See the module essay. ``clock``: monotonic seconds; ``cpu_clock``: the CPU seconds of the thread that
    renders (the event loop's)."""

    def __init__(self, *, share: float, clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be a fraction of a core > 0 and <= 1, got {share!r}")
        self.share = share
        self._clock, self._cpu_clock = clock, cpu_clock
        self._kept: dict[Hashable, Rendered] = {}
        self._read_s: dict[Hashable, float] = {}   # when each key was last read

    def last(self, key: Hashable) -> Rendered | None:
        """The last render of ``key`` (None: none kept)."""
        return self._kept.get(key)

    def reusable(self, key: Hashable) -> Rendered | None:
        """The last render of ``key``, while a new one would take rendering past ``share`` (None: render anew)."""
        last = self._kept.get(key)
        if last is None or last.cpu_s < FRESH_BELOW_CPU_S:
            return None
        costly_cpu_s = sum(r.cpu_s for r in self._kept.values() if r.cpu_s >= FRESH_BELOW_CPU_S)
        return last if self._clock() < last.started_s + costly_cpu_s / self.share else None

    async def answer(self, key: Hashable, render: Callable[[], Pieces]) -> Answer:
        """The answer to one read of ``key``: its last render again (see ``reusable``) or ``render()`` run now, up
        to its first piece before this returns -- a view's first piece comes once it is built, so a failure while
        building it (the grant book's store unreachable) raises here and is answered as such, not as a 200 cut
        short."""
        now = self._clock()
        self._forget(now)
        self._read_s[key] = now
        last = self.reusable(key)
        if last is not None:
            return Answer(now - last.started_s, _resend(last.pieces))
        body = self._render(key, render)
        first = await anext(body, b"")
        return Answer(None, _after(first, body))

    def _forget(self, now: float) -> None:
        for key in [k for k, at in self._read_s.items() if at < now - FORGET_AFTER_S]:
            del self._read_s[key]
            self._kept.pop(key, None)

    async def _render(self, key: Hashable, render: Callable[[], Pieces]) -> AsyncIterator[bytes]:
        started_s, cpu_s, kept = self._clock(), 0.0, []
        steps = render()   # (a generator: it does nothing until the first next)
        while True:
            before = self._cpu_clock()
            piece = next(steps, b"")
            cpu_s += self._cpu_clock() - before
            if piece == b"":   # (every piece holds at least a character)
                break
            if piece is not None:
                kept.append(piece)
                yield piece
            await asyncio.sleep(0)
        self._kept[key] = Rendered(started_s, cpu_s, tuple(kept))


async def _after(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for piece in rest:
        yield piece


async def _resend(pieces: tuple[bytes, ...]) -> AsyncIterator[bytes]:
    """The pieces of a render, sent again in chunks of ``SEND_BYTES`` or just over (whole pieces)."""
    group: list[bytes] = []
    size = 0
    for piece in pieces:
        group.append(piece)
        size += len(piece)
        if size >= SEND_BYTES:
            yield b"".join(group)
            group, size = [], 0
            await asyncio.sleep(0)
    if group:
        yield b"".join(group)


def streamed(answer: Answer, media_type: str) -> StreamingResponse:
    """``answer`` as a streamed HTTP response, with an ``Age`` header (whole seconds) when it is a reused render."""
    headers = {} if answer.age_s is None else {"Age": str(int(answer.age_s))}
    return StreamingResponse(answer.body, media_type=media_type, headers=headers)

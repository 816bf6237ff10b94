"""What every benchmark module shares: result rows, statistics, saturating producer threads, the machine, the
table and README writers.

A result row is a dict with the keys of ``ROW_KEYS``: ``section``, ``name``, ``value`` (a float), ``unit``,
``goal`` (a string such as ">= 5x fastest peer", empty when there is none), ``ok`` (True/False against the goal,
None when there is no goal) and ``note``.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
import threading
import time
import timeit
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROW_KEYS = ("section", "name", "value", "unit", "goal", "ok", "note")
README_START = "<!-- bench:start -->"
README_END = "<!-- bench:end -->"


class MarkersMissing(ValueError):
    """README.md lacks the ``<!-- bench:start -->`` / ``<!-- bench:end -->`` lines the table goes between."""


def row(section: str, name: str, value: float, unit: str, goal: str = "", ok: bool | None = None,
        note: str = "") -> dict[str, Any]:
    return {"section": section, "name": name, "value": float(value), "unit": unit, "goal": goal,
            "ok": None if ok is None else bool(ok), "note": note}


def normalise(section: str, raw: dict[str, Any]) -> dict[str, Any]:
    """A row from any module in the runner's shape (missing section/note/goal/ok filled in)."""
    value = raw.get("value")
    try:
        value = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    ok = raw.get("ok")
    return {"section": str(raw.get("section") or section), "name": str(raw.get("name", "?")), "value": value,
            "unit": str(raw.get("unit", "")), "goal": str(raw.get("goal") or ""),
            "ok": None if ok is None else bool(ok), "note": str(raw.get("note") or "")}


# --- statistics -------------------------------------------------------------------------------------------

def jain_index(xs: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when all are equal, 1/n when one gets everything."""
    if not xs:
        raise ValueError("Jain's index of no values")
    if any(x < 0 for x in xs):
        raise ValueError("Jain's index is defined for non-negative values")
    squares = sum(x * x for x in xs)
    if squares == 0:
        return 1.0  # nobody got anything: equally so
    return sum(xs) ** 2 / (len(xs) * squares)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of already sorted values, nearest rank."""
    if not sorted_values:
        return math.nan
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return float(sorted_values[k])


def median(xs: Iterable[float]) -> float:
    return float(statistics.median(list(xs)))


def ns_per_call(fn: Callable[[], Any] | str, number: int, repeat: int, globals_: dict | None = None) -> float:
    """timeit, min of ``repeat`` runs of ``number`` calls, in ns per call (the min is the least disturbed run)."""
    times = timeit.repeat(fn, number=number, repeat=repeat, globals=globals_)
    return min(times) / number * 1e9


# --- a naive limiter, for contrast --------------------------------------------------------------------------

class NaiveLimiter:
    """What one writes first: a token bucket behind a ``threading.Lock`` (Pulsar's old "precise" limiter)."""

    def __init__(self, rate: float, capacity: float | None = None):
        self.rate = rate
        self.capacity = rate if capacity is None else capacity
        self.tokens = float(self.capacity)
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def try_acquire(self, n: float = 1) -> bool:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= n:
                self.tokens -= n
                return True
            return False


# --- saturating producer threads -----------------------------------------------------------------------------

StampLoop = Callable[[list[bool], array], None]
"""A producer thread's body: runs until ``stop[0]``, appending ``time.monotonic_ns()`` (the clock the limiters
read) to ``out`` for every message admitted."""


def stamp_admitted(acquire: Callable[[], bool]) -> StampLoop:
    """The loop of a saturating producer: ``acquire()`` as fast as it can, stamping every admitted message."""
    def loop(stop: list[bool], out: array) -> None:
        admit, stamp, append = acquire, time.monotonic_ns, out.append  # locals: the loop's own cost stays small
        while not stop[0]:
            if admit():
                append(stamp())
    return loop


@contextmanager
def saturating(loops: Sequence[StampLoop], release: Callable[[], None]) -> Iterator[list[array]]:
    """Runs each loop in its own daemon thread for the ``with`` block and yields their stamps, one array per loop
    (each in time order). On leaving: raise the stop flag, ``release()`` whatever a thread may be waiting on (a
    limiter's ``close`` resumes its paused producers, so they see the flag), then join the threads."""
    stop, outs = [False], [array("q") for _ in loops]
    threads = [threading.Thread(target=loop, args=(stop, out), daemon=True)
               for loop, out in zip(loops, outs, strict=True)]
    for t in threads:
        t.start()
    try:
        yield outs
    finally:
        stop[0] = True
        release()
        for t in threads:
            t.join(timeout=5)


# --- the machine --------------------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(terse=True),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def caption(info: dict[str, Any], quick: bool = False) -> str:
    mode = ", --quick" if quick else ""
    return (f"Measured {info['date']} on {info['nproc']} CPUs, {info['implementation']} {info['python']} "
            f"({info['platform']}{mode}).")


# --- output -------------------------------------------------------------------------------------------------

def fmt_value(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value) >= 999.5:
        return f"{value:,.0f}"
    if value == 0 or abs(value) >= 0.01:
        return f"{value:.4g}"
    return f"{value:.3g}"


def fmt_ok(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "MISSED")


def text_table(rows: Sequence[dict[str, Any]]) -> str:
    headers = ("section", "measurement", "value", "unit", "goal", "met", "note")
    cells = [(r["section"], r["name"], fmt_value(r["value"]), r["unit"], r["goal"], fmt_ok(r["ok"]), r["note"])
             for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
    widths[-1] = len(headers[-1])  # the note runs on, unpadded
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    for c in cells:
        out.append("  ".join((v.rjust(w) if i == 2 else v.ljust(w)) for i, (v, w) in
                             enumerate(zip(c, widths, strict=True))).rstrip())
    return "\n".join(out)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[dict[str, Any]], caption_text: str) -> str:
    out = [f"_{_md(caption_text)}_", "", "| section | measurement | value | unit | goal | met | note |",
           "|---|---|--:|---|---|---|---|"]
    for r in rows:
        out.append(f"| {_md(r['section'])} | {_md(r['name'])} | {fmt_value(r['value'])} | {_md(r['unit'])} | "
                   f"{_md(r['goal'])} | {fmt_ok(r['ok'])} | {_md(r['note'])} |")
    return "\n".join(out)


def marker_lines(lines: Sequence[str]) -> tuple[int, int]:
    """The indexes of the start and the end marker line in ``lines``; ``MarkersMissing`` unless there is
    exactly one of each, in that order."""
    starts = [i for i, line in enumerate(lines) if line.strip() == README_START]
    ends = [i for i, line in enumerate(lines) if line.strip() == README_END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise MarkersMissing(f"expected one line {README_START!r} followed by one line {README_END!r}; found "
                             f"{len(starts)} start and {len(ends)} end marker(s)")
    return starts[0], ends[0]


def replace_between_markers(text: str, body: str) -> str:
    """``text`` with everything between the start and end marker lines replaced by ``body``."""
    lines = text.splitlines(keepends=True)
    start, end = marker_lines(lines)
    newline = "\r\n" if lines[start].endswith("\r\n") else "\n"
    middle = body.replace("\n", newline).rstrip(newline) + newline
    return "".join(lines[: start + 1]) + middle + "".join(lines[end:])


def write_readme(path: Path | str, body: str) -> None:
    """Put ``body`` between the bench markers of the file at ``path``; nothing else changes."""
    path = Path(path)
    text = path.read_bytes().decode("utf-8")  # keep the line endings as they are
    path.write_text(replace_between_markers(text, body), encoding="utf-8", newline="")

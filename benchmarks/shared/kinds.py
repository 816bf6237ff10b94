"""The ways a Spark task can hold a shared limit, side by side -- run inside the Spark tasks.

- ``ours``: throttlescope's public helper ``collectors.spark.throttle_arrow(topic)`` (or, with ``helper="rows"``,
  ``throttle_rows`` over the batches' rows, each row recorded as it is passed on); the limit is a shared policy
  on the control plane, split between the workers that send;
- ``static``: what users do today: ``limit / tasks`` for each Python worker, a local token bucket of its own
  (``limiter.PublishRateLimiter``, kept by the worker across tasks, as a per-executor limiter is);
- ``redis``: a central exact limiter: ``limits``' moving window on Redis, one round trip per acquire (a refused
  acquire is retried every ``REDIS_RETRY_S``); its limit can be changed live (``redis_limit_key``);
- ``redis-sliced``: the same, each batch charged as ours charges it -- in slices of at most a 40th of the limit's
  second (``limiter.producer.ACQUIRE_SHARE``), each passed on when acquired: what a comparison owes to the size of
  an acquire rather than to the limiter (Redis charges a 100-row batch whole: a tenth of 1,000 a second);
- ``none``: no limiter at all, each batch passed on as it comes: Spark's own pace on the workload, what the job
  would send with no limit -- its demand. Where that is below the limit, no limiter can admit the limit.

``arrow_fn(kind, ...)`` returns the ``mapInArrow`` function. Each task records every admitted batch as ``<unix time>
<rows> <seconds it waited for the limiter>`` (and, for a task held to a pace, the batch the rows came from, counted
from 0 in the task: ``task_logs`` sums a batch's slices) and writes its lines to
``<log_dir>/<pid>-<random>.log`` when it ends (or every ``FLUSH_EVERY`` batches, so a killed executor's tasks leave
what they sent), and its span so far, ``<start> <end>``, to ``<pid>-<random>.span`` beside it.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["arrow_fn", "slice_waits", "KINDS", "REDIS_RETRY_S", "redis_limit_key", "cost_per_acquire_s"]

KINDS = ("ours", "static", "redis", "redis-sliced", "none")
HELPERS = ("arrow", "rows")   # ours' helper: ``throttle_arrow``, or ``throttle_rows`` over the batches' rows
REDIS_RETRY_S = 0.002
LIMIT_REFRESH_S = 1.0   # a Redis limiter's tasks read its live limit this often (the control plane's report interval)
FLUSH_EVERY = 20


class _Recorder:
    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, f"{os.getpid()}-{secrets.token_hex(4)}.log")
        self.lines: list[str] = []
        self.started = time.time()

    def admitted(self, rows: int, waited_s: float, batch: int | None = None) -> None:
        """``rows`` admitted now after ``waited_s`` for the limiter; ``batch``: which of a paced task's batches."""
        tail = "" if batch is None else f" {batch}"
        self.lines.append(f"{time.time():.6f} {rows} {waited_s:.6f}{tail}\n")
        if len(self.lines) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            with open(self.path, "a") as f:
                f.writelines(self.lines)
            self.lines = []
        # the task's span so far (``task_logs``): when Spark ran no task at all
        with open(self.path[:-len(".log")] + ".span", "w") as f:
            f.write(f"{self.started:.6f} {time.time():.6f}\n")

    def requests(self) -> None:
        """How many grant requests (asks and give-backs) this worker's participant has sent so far, and when
        (``windows.requests_per_s``); one file per worker, in order."""
        from collectors.runtime import current_participant

        keeper = getattr(current_participant(), "grant_keeper", None)
        if keeper is not None:
            with open(os.path.join(os.path.dirname(self.path), f"{os.getpid()}.requests"), "a") as f:
                f.write(f"{time.time():.6f} {keeper.asks + keeper.returns}\n")


class _Pacer:
    """Holds a task to ``rows_per_s`` (the source's own pace; 0 = as fast as the limit lets it)."""

    def __init__(self, rows_per_s: float):
        self.rows_per_s, self.start, self.sent = rows_per_s, time.monotonic(), 0

    def before(self, rows: int) -> None:
        if self.rows_per_s > 0:
            due = self.start + self.sent / self.rows_per_s
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.sent += rows


def slice_waits(helper: Callable[[Iterator[Any]], Iterator[Any]], batches: Iterator[Any], pacer: _Pacer,
                now_s: Callable[[], float] = time.monotonic) -> Iterator[tuple[Any, float, int]]:
    """Each slice the helper (``throttle_arrow``'s function, or ``throttle_rows`` over the batches' rows: each row)
    passes on, with the seconds it waited for the limiter and the batch it came from (the last one the source handed
    over, counted from 0): the wait runs from when the helper was asked for the slice, or from when the source
    handed it the batch the slice is cut from (after the pacer's sleep), whichever is later; the first slice also
    waits for what the helper does before it takes its first batch (its producer: it waited there for its pools'
    first grant until 2026-11-27, a round trip at each task's start; now it starts the ask there). From the batch's
    hand-over alone, a batch's later slices counted the time Spark took to take its earlier ones, and the task's
    start was not counted."""
    handed_s = [0.0]
    setup_s = [0.0]
    handed = [-1]

    def paced() -> Iterator[Any]:
        setup_s[0] = now_s()    # the helper's first look at the source: its setup is done
        for b in batches:
            pacer.before(b.num_rows)
            handed_s[0] = now_s()
            handed[0] += 1
            yield b

    slices = helper(paced())
    first = True
    while True:
        asked_s = now_s()
        b = next(slices, None)
        if b is None:
            return
        waited_s = now_s() - max(asked_s, handed_s[0])
        if first:
            waited_s += max(0.0, setup_s[0] - asked_s)
            first = False
        yield b, waited_s, handed[0]


def redis_limit_key(key: str) -> str:
    """Where a Redis limiter's live limit is kept (msgs/s; absent: the limit it started with)."""
    return f"{key}:limit"


def _redis_acquire(url: str, limit_per_s: float, key: str, refresh_s: float = LIMIT_REFRESH_S
                   ) -> Callable[[int], None]:
    """One ``limits`` moving-window hit per acquire, the limit read live from ``redis_limit_key(key)`` every
    ``refresh_s`` -- what a user who changes a Redis limiter's limit without a restart does. The window
    keeps one key whatever the limit (``limits``' ``hit`` keys it by the limit too: a cut would start an empty
    window and let the new limit through on top of the old one's last second)."""
    import redis
    from limits import parse
    from limits.storage import storage_from_string

    storage, client = storage_from_string(url), redis.Redis.from_url(url)
    item = parse(f"{int(limit_per_s)}/second")
    window_key, expiry_s = item.key_for(key), item.get_expiry()
    live = {"limit": int(limit_per_s), "read_at": -math.inf}

    def acquire(rows: int) -> None:
        while True:
            now = time.monotonic()
            if now - live["read_at"] >= refresh_s:
                value = client.get(redis_limit_key(key))
                live.update(read_at=now, limit=int(float(value)) if value is not None else live["limit"])
            if storage.acquire_entry(window_key, live["limit"], expiry_s, amount=rows):
                return
            time.sleep(REDIS_RETRY_S)
    return acquire


_STATIC: dict[tuple[str, float], Any] = {}   # per Python worker: PySpark reuses workers across tasks


def _static_acquire(key: str, limit_per_task: float) -> Callable[[int], None]:
    from limiter import Producer, PublishRateLimiter, Rate

    limiter = _STATIC.get((key, limit_per_task))
    if limiter is None:
        limiter = _STATIC[(key, limit_per_task)] = PublishRateLimiter(Rate(limit_per_task, -1, 1))
    producer = Producer("static", [limiter])
    return lambda rows: producer.acquire(msgs=rows)


def _unlimited(rows: int) -> None:
    """No limiter: every acquire goes through at once (the ``none`` kind)."""


def _partition() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def arrow_fn(kind: str, topics: tuple[str, ...], log_dir: str, *, limit_per_s: float = 0, tasks: int = 1,
             redis_url: str = "", redis_key: str = "shared", pace_per_task: float = 0, helper: str = "arrow"
             ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function of ``kind``; partition ``p`` sends to ``topics[p % len(topics)]`` (see the
    module doc). ``limit_per_s``: the shared limit (the static split and Redis enforce it themselves);
    ``helper``: ours' helper, ``"arrow"`` or ``"rows"``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if helper not in HELPERS:
        raise ValueError(f"helper must be one of {HELPERS}, got {helper!r}")
    from limiter.producer import ACQUIRE_SHARE

    # redis-sliced: ours' slices (a 40th of the limit's second; a batch smaller than that goes whole)
    most = max(1, int(ACQUIRE_SHARE * limit_per_s)) if kind == "redis-sliced" else None
    paced = pace_per_task > 0

    def fn(batches: Iterator[Any]) -> Iterator[Any]:
        record, pacer = _Recorder(log_dir), _Pacer(pace_per_task)
        topic = topics[_partition() % len(topics)]
        try:
            if kind == "ours" and helper == "rows":
                from collectors.spark import throttle_rows

                def rows_helper(arrow: Iterator[Any]) -> Iterator[Any]:
                    return throttle_rows((v for b in arrow for v in b.column(0).to_pylist()), topic)

                for _, waited_s, _ in slice_waits(rows_helper, batches, pacer):   # (each row; no batch goes on)
                    record.admitted(1, waited_s)
                record.requests()
                return
            if kind == "ours":
                from collectors.spark import throttle_arrow
                charged = throttle_arrow(topic)
            elif kind == "none":
                charged = _charged(_unlimited, None)
            else:
                charged = _charged(_static_acquire(redis_key, limit_per_s / tasks) if kind == "static"
                                   else _redis_acquire(redis_url, limit_per_s, redis_key), most)
            for b, waited_s, batch in slice_waits(charged, batches, pacer):
                record.admitted(b.num_rows, waited_s, batch if paced else None)
                yield b
            if kind == "ours":
                record.requests()
        finally:
            record.flush()
    return fn


def _charged(acquire: Callable[[int], None], most: int | None) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A helper like ``throttle_arrow``'s function for the peers: each batch passed on once ``acquire`` let it
    through -- whole, or in slices of at most ``most`` rows, each acquired before it is passed on."""
    def charged(batches: Iterator[Any]) -> Iterator[Any]:
        for b in batches:
            if b.num_rows == 0:
                yield b   # (nothing to charge)
                continue
            step = most or b.num_rows
            for at in range(0, b.num_rows, step):
                rows = min(step, b.num_rows - at)
                acquire(rows)
                yield b if rows == b.num_rows else b.slice(at, rows)
    return charged


def cost_per_acquire_s(redis_url: str) -> dict[str, float]:
    """Seconds per acquire, here: a producer's local ``acquire`` (ours) against a Redis ``hit`` (one round trip)."""
    from limiter import Producer, PublishRateLimiter, Rate

    producer = Producer("cost", [PublishRateLimiter(Rate(1e12, -1, 1))])
    acquire = _redis_acquire(redis_url, 1e9, "cost")
    return {"ours": _seconds_each(lambda: producer.acquire(msgs=100), 20_000),
            "redis": _seconds_each(lambda: acquire(1), 2_000)}


def _seconds_each(fn: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n

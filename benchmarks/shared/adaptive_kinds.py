"""Three ways a Spark task can send to a sink of unknown capacity (``sink_server.SinkServer``) -- run inside the
Spark tasks. Each task re-batches its rows into requests of ``REQUEST_ROWS`` records and POSTs them, one at a
time; a refused request is not sent again (what the sink refused is what the figures count).

- ``ours``: the helpers (``collectors.spark.throttle_arrow``) under a shared limit that is ``adaptive`` on the
  control plane, every answer told to ``collectors.spark.report_outcome``: the cluster learns the capacity;
- ``none``: the same shared limit, not adaptive (what a user has without adaptation: the limit they guessed);
- ``alone``: per-task AIMD without sharing -- each Python worker runs its own ``limiter.adaptive.AdaptiveRate``
  (ceiling: its part of the limit) and its own local bucket at that rate, learns from its own answers only, and
  sleeps out a Retry-After by itself (AWS SDKs' adaptive retry mode, Vector's adaptive concurrency, one client
  at a time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["sender_fn", "post_records", "KINDS", "REQUEST_ROWS"]

KINDS = ("ours", "none", "alone")
REQUEST_ROWS = 20

_CLIENTS: dict[str, Any] = {}
_ALONE: dict[str, tuple[Any, Any]] = {}   # per Python worker (PySpark reuses workers across tasks)


def _client(url: str) -> Any:
    import httpx

    client = _CLIENTS.get(url)
    if client is None:
        client = _CLIENTS[url] = httpx.Client(timeout=5.0)
    return client


def post_records(url: str, rows: int) -> tuple[bool, float | None]:
    """(taken, Retry-After seconds) of one request of ``rows`` records."""
    from collectors.outcomes import retry_after_from

    r = _client(url).post(url, content=b"{}", headers={"X-Records": str(rows), "Content-Type": "application/json"})
    return r.status_code < 400, retry_after_from(r.headers) if r.status_code == 429 else None


def _requests(batches: Iterator[Any]) -> Iterator[Any]:
    for b in batches:
        for offset in range(0, b.num_rows, REQUEST_ROWS):
            yield b.slice(offset, REQUEST_ROWS)


def _alone(key: str, ceiling_per_s: float) -> tuple[Any, Any]:
    from limiter import Producer, PublishRateLimiter, Rate
    from limiter.adaptive import AdaptiveRate

    kept = _ALONE.get(key)
    if kept is None:
        kept = _ALONE[key] = (AdaptiveRate(ceiling_per_s, now_s=time.monotonic()),
                              PublishRateLimiter(Rate(ceiling_per_s, -1, 1)))
    adaptive, limiter = kept
    return adaptive, (limiter, Producer("alone", [limiter]))


def sender_fn(kind: str, topic: str, url: str, *, ceiling_per_s: float = 0, tasks: int = 1,
              key: str = "alone") -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function of ``kind`` (see the module doc); yields nothing downstream."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")

    def fn(batches: Iterator[Any]) -> Iterator[Any]:
        if kind in ("ours", "none"):
            from collectors.spark import report_outcome, throttle_arrow

            for b in throttle_arrow(topic)(_requests(batches)):
                taken, wait_s = post_records(url, b.num_rows)
                if taken:
                    report_outcome(topic, "ok", b.num_rows)
                else:
                    report_outcome(topic, "throttled", b.num_rows, wait_s)
        else:
            from limiter import Rate
            from limiter.adaptive import Outcome

            adaptive, (limiter, producer) = _alone(key, ceiling_per_s / tasks)
            for b in _requests(batches):
                producer.acquire(msgs=b.num_rows)
                taken, wait_s = post_records(url, b.num_rows)
                now = time.monotonic()
                if taken:
                    adaptive.observe(Outcome.OK, b.num_rows, now)
                else:
                    adaptive.observe(Outcome.THROTTLED, b.num_rows, now, retry_after_s=wait_s)
                rate = adaptive.rate_per_s(now)
                if rate <= 0:                       # its own Retry-After: it alone waits
                    time.sleep(adaptive.paused_for_s(now))
                    rate = adaptive.rate_per_s(time.monotonic())
                if abs(rate - limiter.rate.msgs_per_s()) > 1e-6:
                    limiter.update_rate(Rate(max(rate, 1e-3), -1, 1))
        return iter(())
    return fn

"""Replicas' live state: every accepted report goes into one Redis stream, and every replica reads it.

How it works and why
--------------------
Behind one address (SO_REUSEPORT, a load balancer) a participant's reports land on whichever replica its
connection reached, and may move to another at any time (a replica dies, a connection is re-made). The live
state -- who is there, their usage and demand, the history the dashboard draws, the counters /metrics exports --
must still be the whole platform's on every replica, or the dashboard shows a third of the participants and
flickers between replicas.

So the reports themselves are the shared state, in Redis: a replica that accepts a report appends it to the
stream ``<prefix>reports`` (``XADD``, capped at ``MAX_ENTRIES`` with Redis's approximate trimming), and each
replica's ``ReportFollower`` thread reads the stream from where it left off (``XREAD`` blocking up to
``BLOCK_MS``) and ingests the other replicas' reports into its own ``LiveState`` -- the same ``ingest``, so the
same rules (a report older than 2 intervals, or not above the last ``seq``, is ignored). A goodbye is an entry
too. The stream is the log, Redis holds it; no replica sends anything to another.

Costs and limits, stated: every replica parses every report (a foreign one once, skipped unparsed when its
``seq`` is not news), so report CPU does not spread over replicas -- grants, four to six asks a second per
shared limit while a participant sends below it (up to ``MAX_ASKS_PER_S`` over all its participants while it
binds), do. A replica that starts (or a Redis that restarts) sees each participant from its next report on;
history before that is not brought back. A suppressed entry (``usage_unchanged``) whose first
full report a replica missed stays out of that replica's views until the participant sends it in full.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from controlplane.grant_tables import FAIL_FAST_S, Breaker
from controlplane.state import LiveState
from protocol import Report

__all__ = ["ReportStream", "ReportFollower", "MAX_ENTRIES", "BLOCK_MS"]

log = logging.getLogger("controlplane")

MAX_ENTRIES = 200_000   # reports kept in the stream: a few intervals of a large platform
BLOCK_MS = 1000


class ReportStream:
    """This replica's end of the stream: ``put`` an accepted report, ``bye`` a goodbye (both best effort: a
    Redis that is down costs the other replicas' views, not the participant its answer)."""

    def __init__(self, url: str, prefix: str = "throttlescope:live:", client: Any = None,
                 replica_id: str | None = None) -> None:
        import redis

        self.url = url
        self.key = prefix + "reports"
        self.replica_id = replica_id or f"{socket.gethostname()}:{os.getpid()}"
        self._errors = (redis.RedisError, OSError)
        self._redis = client if client is not None else redis.Redis.from_url(
            url, socket_timeout=1.0, socket_connect_timeout=1.0)
        # after a failure: skipped for FAIL_FAST_S (not every report waits on it)
        self._breaker = Breaker(f"cannot pass reports to the other replicas through {url}; their views miss "
                                f"this replica's participants until it is back",
                                f"passing reports to the other replicas through {url} again")

    def put(self, report: Report) -> None:
        self._add({"r": self.replica_id, "pid": report.participant.participant_id, "seq": report.seq,
                   "body": report.model_dump_json()})

    def bye(self, participant_id: str) -> None:
        self._add({"r": self.replica_id, "pid": participant_id, "bye": "1"})

    def _add(self, fields: dict[str, Any]) -> None:
        if self._breaker.open_reason() is not None:
            return
        try:
            self._redis.xadd(self.key, fields, maxlen=MAX_ENTRIES, approximate=True)
        except self._errors as e:
            self._breaker.failed(e)
            return
        self._breaker.worked()


class ReportFollower:
    """Reads the other replicas' entries into ``live`` (a daemon thread; ``start``/``stop``)."""

    def __init__(self, stream: ReportStream, live: LiveState, block_ms: int = BLOCK_MS) -> None:
        import redis

        self.stream, self.live, self.block_ms = stream, live, block_ms
        self._redis = redis.Redis.from_url(stream.url, socket_timeout=block_ms / 1000 + 2.0,
                                           socket_connect_timeout=2.0)
        self._errors = (redis.RedisError, OSError)
        self._breaker = Breaker(f"cannot read the other replicas' reports from {stream.url}; retrying",
                                f"reading the other replicas' reports from {stream.url} again")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="throttlescope-report-follower", daemon=True)
        # from now on: reports older than 2 intervals would be ignored anyway
        self._last_id = f"{int(time.time() * 1000 - 2000 * live.interval_s)}-0"
        self.ingested = 0

    def start(self) -> ReportFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.block_ms / 1000 + 3.0)

    def follow_once(self) -> int:
        """Read and ingest what came since the last read (waiting up to ``block_ms`` for it); how many entries."""
        answer = self._redis.xread({self.stream.key: self._last_id}, count=10_000, block=self.block_ms)
        entries = answer[0][1] if answer else []
        for entry_id, fields in entries:
            self._last_id = entry_id
            self._apply(fields)
        self.live.settle()
        return len(entries)

    def _apply(self, fields: dict[bytes, bytes]) -> None:
        if fields.get(b"r", b"").decode() == self.stream.replica_id:
            return   # its own: ingested when it came in
        pid = fields.get(b"pid", b"").decode()
        if b"bye" in fields:
            self.live.goodbye(pid)
            return
        try:
            seq = int(fields[b"seq"])
            if seq <= self.live.last_seq(pid):
                return   # not news (it came here too, or a later one did)
            accepted, _ = self.live.ingest(Report.model_validate_json(fields[b"body"]))
        except (KeyError, ValueError) as e:   # (pydantic's ValidationError is a ValueError)
            log.warning("throttlescope: an entry of %s is not a report (%s); skipped", self.stream.key, e)
            return
        self.ingested += accepted

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.follow_once()
            except self._errors as e:
                self._breaker.failed(e)
                self._last_id = "0-0"   # a Redis that comes back empty starts its stream afresh
                self._stop.wait(FAIL_FAST_S)
                continue
            self._breaker.worked()

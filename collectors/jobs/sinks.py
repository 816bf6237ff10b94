"""Where the publish job delivers: Parquet files (default) or an HTTP endpoint, both idempotent per task.

How it works and why
--------------------
A sink gets ``deliver(producer, topic, chunk, sent_at, seq)`` calls from several sender threads of one task, each
``chunk`` an Arrow table of records (``id``, ``topic``, ``payload``) that its producer has just been admitted to
send, then one ``close()`` (success) or ``abort()`` (failure).

- ``FileSink`` keeps the delivered chunks (with ``producer`` and ``sent_at`` columns added) and writes them as
  one Parquet file on ``close()``, atomically (``common.atomic_write_table``) under a name that depends on the
  partition (and micro-batch), not the attempt: a retried task replaces the file of the failed attempt.
- ``HttpSink`` POSTs every chunk at once as JSON ``{"producer", "topic", "sent_at", "key", "records": [{"id",
  "payload"}, ...]}`` with the header ``Idempotency-Key: <key>``, where the key names the run, micro-batch,
  partition, producer and chunk number -- the same for every attempt of a task, so an endpoint that remembers
  keys stores each chunk once however often Spark retries. Transport errors and 5xx are retried (exponential
  backoff, bounded); a 4xx fails the task -- except 429 (and 503), the endpoint's "too many": retried after its
  wait (``retry-after-ms`` if it sends one, else its Retry-After, else the backoff) for up to
  ``THROTTLED_BUDGET_S``. Every answer is told to ``report`` (the
  participant's ``report_outcome``): a 2xx took the chunk's records, a 429 or 503 refused them as too many (with
  its Retry-After), anything else failed -- an adaptive limit of the topic learns the endpoint's capacity from
  every task's answers (``limiter.adaptive``).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from ..outcomes import retry_after_from
from .common import atomic_write_table

__all__ = ["FileSink", "HttpSink", "make_sink", "HTTP_RETRIES", "THROTTLED_BUDGET_S"]

HTTP_RETRIES = 5
THROTTLED_BUDGET_S = 120.0   # a chunk the endpoint keeps refusing as "too many" fails the task after this long
THROTTLED = (429, 503)
Report = Callable[[str, str, float, "float | None", "float | None"], None]


class FileSink:
    def __init__(self, path: str | Path, tag: str):
        self.path, self.tag = Path(path), tag
        self._parts: list[pa.Table] = []
        self._lock = threading.Lock()

    def deliver(self, producer: str, topic: str, chunk: pa.Table, sent_at: float, seq: int) -> None:
        n = chunk.num_rows
        chunk = chunk.append_column("producer", pa.array([producer] * n, pa.string()))
        chunk = chunk.append_column("sent_at", pa.array([sent_at] * n, pa.float64()))
        with self._lock:
            self._parts.append(chunk)

    def close(self) -> None:
        with self._lock:
            parts, self._parts = self._parts, []
        if parts:
            atomic_write_table(pa.concat_tables(parts).combine_chunks(), self.path, self.tag)

    def abort(self) -> None:
        with self._lock:
            self._parts = []


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


class HttpSink:
    def __init__(self, url: str, key_prefix: str, timeout_s: float = 10.0, retries: int = HTTP_RETRIES,
                 report: Report | None = None, throttled_budget_s: float = THROTTLED_BUDGET_S):
        self.url, self.key_prefix, self.retries = url, key_prefix, retries
        self.report, self.throttled_budget_s = report, throttled_budget_s
        self._client = httpx.Client(timeout=timeout_s)

    def _told(self, topic: str, outcome: str, n: int, retry_after: float | None = None,
              latency_s: float | None = None) -> None:
        if self.report is not None:
            self.report(topic, outcome, n, retry_after, latency_s)

    def deliver(self, producer: str, topic: str, chunk: pa.Table, sent_at: float, seq: int) -> None:
        key = f"{self.key_prefix}/{producer}/{seq}"
        records = chunk.select(["id", "payload"]).to_pylist() if "payload" in chunk.column_names \
            else chunk.select(["id"]).to_pylist()
        body = json.dumps({"producer": producer, "topic": topic, "sent_at": sent_at, "key": key,
                           "records": records}, default=_json_default)
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        n, attempt, throttled_until = max(1, chunk.num_rows), 0, time.monotonic() + self.throttled_budget_s
        while True:
            wait_s = None
            sent = time.monotonic()
            try:
                resp = self._client.post(self.url, content=body, headers=headers)
            except httpx.TransportError as e:
                error = f"{type(e).__name__}: {e}"
                self._told(topic, "error", n)
            else:
                if resp.status_code < 400:
                    self._told(topic, "ok", n, None, time.monotonic() - sent)
                    return
                error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                if resp.status_code in THROTTLED:
                    wait_s = retry_after_from(resp.headers)
                    self._told(topic, "throttled", n, wait_s)
                    if time.monotonic() < throttled_until:   # too many: not a failure of this chunk
                        time.sleep(min(30.0, max(0.01, wait_s if wait_s is not None else 0.05)))
                        continue
                else:
                    self._told(topic, "error", n)
                    if resp.status_code < 500:
                        raise RuntimeError(f"the HTTP sink {self.url} refused chunk {key}: {error}")
            if attempt >= self.retries:
                raise RuntimeError(f"the HTTP sink {self.url} failed for chunk {key} after {attempt + 1} "
                                   f"attempts: {error}")
            time.sleep(min(2.0, 0.1 * 2 ** attempt))
            attempt += 1

    def close(self) -> None:
        self._client.close()

    def abort(self) -> None:
        self._client.close()


def make_sink(sink: str, path: str | Path, key_prefix: str, tag: str, timeout_s: float,
              report: Report | None = None) -> FileSink | HttpSink:
    """``sink`` is ``"files"`` (write ``path``) or an ``http(s)://`` URL (its answers told to ``report``)."""
    if sink == "files":
        return FileSink(path, tag)
    return HttpSink(sink, key_prefix, timeout_s, report=report)

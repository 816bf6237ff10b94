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
  backoff, bounded); a 4xx fails the task.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from .common import atomic_write_table

__all__ = ["FileSink", "HttpSink", "make_sink", "HTTP_RETRIES"]

HTTP_RETRIES = 5


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
    def __init__(self, url: str, key_prefix: str, timeout_s: float = 10.0, retries: int = HTTP_RETRIES):
        self.url, self.key_prefix, self.retries = url, key_prefix, retries
        self._client = httpx.Client(timeout=timeout_s)

    def deliver(self, producer: str, topic: str, chunk: pa.Table, sent_at: float, seq: int) -> None:
        key = f"{self.key_prefix}/{producer}/{seq}"
        records = chunk.select(["id", "payload"]).to_pylist() if "payload" in chunk.column_names \
            else chunk.select(["id"]).to_pylist()
        body = json.dumps({"producer": producer, "topic": topic, "sent_at": sent_at, "key": key,
                           "records": records}, default=_json_default)
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        for attempt in range(self.retries + 1):
            try:
                resp = self._client.post(self.url, content=body, headers=headers)
            except httpx.TransportError as e:
                error = f"{type(e).__name__}: {e}"
            else:
                if resp.status_code < 400:
                    return
                error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                if resp.status_code < 500:
                    raise RuntimeError(f"the HTTP sink {self.url} refused chunk {key}: {error}")
            if attempt < self.retries:
                time.sleep(min(2.0, 0.1 * 2 ** attempt))
        raise RuntimeError(f"the HTTP sink {self.url} failed for chunk {key} after {self.retries + 1} "
                           f"attempts: {error}")

    def close(self) -> None:
        self._client.close()

    def abort(self) -> None:
        self._client.close()


def make_sink(sink: str, path: str | Path, key_prefix: str, tag: str, timeout_s: float) -> FileSink | HttpSink:
    """``sink`` is ``"files"`` (write ``path``) or an ``http(s)://`` URL."""
    if sink == "files":
        return FileSink(path, tag)
    return HttpSink(sink, key_prefix, timeout_s)

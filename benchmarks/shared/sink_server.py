"""A sink of limited capacity: a real HTTP server on loopback that takes ``capacity_per_s`` records a second
and answers 429 with a Retry-After beyond it -- the downstream API whose capacity a job does not know.

Each ``POST`` carries ``X-Records: n`` (the records of the request); a token bucket of ``capacity_per_s`` holding
``burst_s`` of it takes the request whole (200) or refuses it whole (429, ``Retry-After``: the seconds until it
would be taken, rounded up to whole seconds as HTTP's delay-seconds are -- RFC 9110 allows no fraction, so a
sink asks for a pause of at least a second; with ``retry_after_ms`` it also sends the exact wait in
milliseconds, ``retry-after-ms``, as Azure's services do). Every answer is recorded as ``(time, records,
taken)``; ``set_capacity`` changes the capacity live.
"""

from __future__ import annotations

import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["SinkServer"]


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        try:
            n = max(1, int(self.headers.get("X-Records") or 1))
        except ValueError:
            n = 1
        wait_s = self.server.sink.take(n)
        self.send_response(200 if wait_s is None else 429)
        if wait_s is not None:
            self.send_header("Retry-After", str(max(1, math.ceil(wait_s))))
            if self.server.sink.retry_after_ms:
                self.send_header("retry-after-ms", f"{1000 * wait_s:.1f}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class SinkServer:
    def __init__(self, capacity_per_s: float, burst_s: float = 0.2, retry_after_ms: bool = False):
        self.capacity_per_s, self.burst_s, self.retry_after_ms = float(capacity_per_s), burst_s, retry_after_ms
        self._tokens, self._at = self.capacity_per_s * burst_s, time.monotonic()
        self._lock = threading.Lock()
        self.answers: list[tuple[float, int, bool]] = []   # (unix time, records, taken)
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> SinkServer:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.sink = self  # type: ignore[attr-defined]
        threading.Thread(target=self._server.serve_forever, daemon=True, name="sink-server").start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/ingest"

    def set_capacity(self, capacity_per_s: float) -> None:
        with self._lock:
            self._refill(time.monotonic())
            self.capacity_per_s = float(capacity_per_s)

    def _refill(self, now: float) -> None:
        self._tokens = min(self.capacity_per_s * self.burst_s, self._tokens + (now - self._at) * self.capacity_per_s)
        self._at = now

    def take(self, n: int) -> float | None:
        """None if the ``n`` records are taken, else the seconds until they would be."""
        with self._lock:
            self._refill(time.monotonic())
            taken = self._tokens >= n
            if taken:
                self._tokens -= n
            wait_s = None if taken else (n - self._tokens) / self.capacity_per_s
            self.answers.append((time.time(), n, taken))
        return wait_s

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

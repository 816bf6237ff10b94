"""The publish job's HTTP sink against a real loopback endpoint: a 429 is the endpoint's "too many" -- retried after
its Retry-After and told to the participant as throttled --, a 2xx is told as taken, another 4xx fails the task."""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pyarrow as pa
import pytest

from collectors.jobs.sinks import HttpSink
from collectors.outcomes import retry_after_from, retry_after_s

pytestmark = pytest.mark.unit


class Endpoint(BaseHTTPRequestHandler):
    answers: list[tuple[int, dict[str, str]]] = []   # what the next requests get, then 200
    received: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(self.headers["Idempotency-Key"])
        status, headers = self.answers.pop(0) if self.answers else (200, {})
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    Endpoint.answers, Endpoint.received = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/ingest"
    server.shutdown()
    server.server_close()


CHUNK = pa.table({"id": [1, 2, 3], "payload": [b"a", b"b", b"c"]})


def test_a_429_is_retried_after_its_retry_after_and_told_as_throttled(url: str) -> None:
    told = []
    Endpoint.answers = [(429, {"Retry-After": "0"}), (503, {}), (200, {})]
    sink = HttpSink(url, "run/b0p0", report=lambda *a: told.append(a))
    sink.deliver("p", "acme/web/api", CHUNK, 1.0, 0)
    sink.close()
    assert Endpoint.received == ["run/b0p0/p/0"] * 3                     # the same chunk, the same key
    assert told[:2] == [("acme/web/api", "throttled", 3, 0.0, None), ("acme/web/api", "throttled", 3, None, None)]
    assert told[2][:4] == ("acme/web/api", "ok", 3, None) and 0 < told[2][4] < 5    # with how long it took


def test_a_429s_wait_in_milliseconds_is_read_before_its_whole_second_retry_after(url: str) -> None:
    """A token bucket a few milliseconds short says "Retry-After: 1" (HTTP has whole seconds only); Azure's
    services send the exact wait in retry-after-ms too, and the sink waits and tells that."""
    told = []
    Endpoint.answers = [(429, {"Retry-After": "1", "retry-after-ms": "4.5"}), (200, {})]
    sink = HttpSink(url, "k", report=lambda *a: told.append(a))
    started = time.monotonic()
    sink.deliver("p", "t/n/x", CHUNK, 1.0, 0)
    sink.close()
    assert time.monotonic() - started < 0.9                              # not the whole second
    assert told[0] == ("t/n/x", "throttled", 3, 0.0045, None)


def test_retry_after_from_prefers_the_milliseconds_headers_and_skips_unreadable_ones() -> None:
    headers = httpx.Headers({"Retry-After": "2", "X-MS-Retry-After-Ms": "250"})
    assert retry_after_from(headers) == 0.25                             # (any case: HTTP's names ignore it)
    assert retry_after_from(httpx.Headers({"retry-after-ms": "soon", "Retry-After": "2"})) == 2.0
    assert retry_after_from(httpx.Headers({"retry-after-ms": "-5", "Retry-After": "3"})) == 3.0
    assert retry_after_from(httpx.Headers({"retry-after-ms": "12", "x-ms-retry-after-ms": "999"})) == 0.012
    assert retry_after_from(httpx.Headers({})) is None


def test_an_endpoint_that_keeps_refusing_fails_the_chunk_after_the_budget(url: str) -> None:
    Endpoint.answers = [(429, {"Retry-After": "0"})] * 1000
    sink = HttpSink(url, "k", report=None, throttled_budget_s=0.2, retries=1)
    with pytest.raises(RuntimeError, match="failed for chunk k/p/0 .*HTTP 429"):
        sink.deliver("p", "t/n/x", CHUNK, 1.0, 0)
    sink.close()


def test_another_4xx_fails_the_task_and_is_told_as_an_error(url: str) -> None:
    told = []
    Endpoint.answers = [(400, {})]
    sink = HttpSink(url, "k", report=lambda *a: told.append(a))
    with pytest.raises(RuntimeError, match="refused chunk k/p/7: HTTP 400"):
        sink.deliver("p", "t/n/x", CHUNK, 1.0, 7)
    sink.close()
    assert told == [("t/n/x", "error", 3, None, None)]


def test_retry_after_reads_seconds_and_http_dates_and_nothing_else() -> None:
    assert retry_after_s("2") == 2.0 and retry_after_s(" 1.5 ") == 1.5
    assert retry_after_s(email.utils.formatdate(1_000_010.0, usegmt=True), now_s=1_000_000.0) == pytest.approx(10)
    assert retry_after_s(email.utils.formatdate(999_990.0, usegmt=True), now_s=1_000_000.0) == 0.0   # past: now
    for bad in (None, "", "soon", "inf", "nan"):
        assert retry_after_s(bad) is None, bad

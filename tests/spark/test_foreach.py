"""``throttle_foreach``: a DataFrame's rows sent from Python, one request each, to a real HTTP server on loopback,
through a shared topic limit: the server itself sees the limit held and every row once.

The helper exists because the form that reads naturally, ``df.mapInArrow(throttle_arrow(t), schema).foreach(post)``,
runs ``post`` in another Python worker than the limiter, which Spark feeds pickled rows in lumps: the server got
1,300-1,490 rows a second under a limit of 500 (``collectors.spark``'s essay; the ``sends`` benchmark rows)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from benchmarks.shared.windows import worst_window_ratio
from tests.spark.conftest import ok

pytestmark = [pytest.mark.spark, pytest.mark.integration]

LIMIT_PER_S = 500
ROWS = 4000   # 8 s at the limit, in 2 tasks


class _Ids(BaseHTTPRequestHandler):
    seen: list[tuple[float, int]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        row = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.seen.append((time.time(), row["id"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


_CLIENTS: dict[str, httpx.Client] = {}   # one keep-alive client per Python worker


def _post_to(url: str) -> Any:
    def post(row: Any) -> None:
        client = _CLIENTS.get(url) or _CLIENTS.setdefault(url, httpx.Client(timeout=10))
        client.post(url, json={"id": row.id}).raise_for_status()
    return post


def test_rows_sent_by_throttle_foreach_reach_the_server_at_the_limit_each_once(spark: Any, admin: httpx.Client
                                                                                ) -> None:
    from collectors.spark import throttle_foreach

    topic = "foreach/web/api"
    ok(admin.post(f"/admin/v2/persistent/{topic}/publishRate", json={"publishThrottlingRateInMsg": LIMIT_PER_S}))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ids)
    server.daemon_threads = True
    _Ids.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/ingest"
        df = spark.range(0, ROWS, numPartitions=2)
        df.foreachPartition(throttle_foreach(topic, _post_to(url)))
    finally:
        server.shutdown()
        server.server_close()
    seen = sorted(_Ids.seen)
    assert sorted(i for _, i in seen) == list(range(ROWS))              # every row, once
    t0, t1 = seen[0][0], seen[-1][0]
    events = [(t, 1.0) for t, _ in seen]
    worst = worst_window_ratio(events, LIMIT_PER_S, t0, t1)
    # the limit as the server saw it: one acquire of slack (a 40th of the limit's second) and this machine's noise
    assert worst <= 1.2 + 1 / 40, f"worst 1-s window {worst:.2f} x the limit"
    assert ROWS / (t1 - t0) >= 0.8 * LIMIT_PER_S, f"{ROWS / (t1 - t0):.0f} rows/s"   # and used


def test_throttle_foreach_refuses_a_send_that_is_not_a_function() -> None:
    from collectors.spark import throttle_foreach

    with pytest.raises(TypeError, match="send must be a function of one row"):
        throttle_foreach("a/b/c", "http://example.invalid")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_rows must be a whole number"):
        throttle_foreach("a/b/c", print, batch_rows=0)

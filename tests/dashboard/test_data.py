"""The data-access module on its own: errors as values when nothing answers, state answers as their models (and
cached as such), and history from Prometheus (a stub Prometheus HTTP API on 127.0.0.1, stopped in a finalizer)
merged into the control plane's history models."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from dashboard import data
from protocol.state import HistoryPoint, QueuesState
from tests.controlplane.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.parallel]


def answer_json(handler: BaseHTTPRequestHandler, body: object, headers: dict[str, str] | None = None) -> None:
    raw = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(raw)))
    handler.end_headers()
    handler.wfile.write(raw)


class PromStub(BaseHTTPRequestHandler):
    queries: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        query = parse_qs(urlsplit(self.path).query)["query"][0]
        PromStub.queries.append(query)
        value = "2" if "throttle_time" in query else "-3" if "bucket_tokens" in query else "7"
        body = {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"level": "topic", "kind": "publish", "name": "a/b/c"},
             "values": [[1000, value], [1001, value]]}]}}
        answer_json(self, body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), PromStub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_nothing_listening_gives_unavailable_and_refused_changes() -> None:
    conn = data.Conn(f"http://127.0.0.1:{free_port()}", "t" * 20)
    got = data.participants(conn)
    assert isinstance(got, data.Unavailable) and got.down and not got.needs_token
    assert "cannot reach the control plane" in got.reason
    outcome = data.send(conn, "PUT", "/admin/v2/resourcegroups/x", {"publishRateInMsgs": 1})
    assert not outcome.ok and outcome.status is None and "cannot reach" in outcome.reason


def test_history_comes_from_prometheus_when_it_is_configured(prometheus: str) -> None:
    conn = data.Conn(f"http://127.0.0.1:{free_port()}", None, prometheus)
    got = data.history(conn, 120.0, level="topic", name="a/b/c")
    assert isinstance(got, data.History)     # the shape the control plane's history is read into
    assert (got.source, got.intervalSeconds, got.windowSeconds, got.rateSpanSeconds) == ("Prometheus", 1, 120, 30)
    [s] = got.series
    assert (s.level, s.kind, s.name) == ("topic", "publish", "a/b/c")
    assert s.points[0] == HistoryPoint(t=1000.0, admittedMsgsPerSecond=7.0, admittedBytesPerSecond=7.0,
                                       throttleSecondsPerSecond=2.0, throttledPerSecond=7.0, tokensMsgs=-3.0,
                                       tokensBytes=-3.0)
    assert [p.t for p in s.points] == [1000.0, 1001.0]
    assert any('throttlescope_throttle_time_seconds_total{level="topic",name="a/b/c"}' in q
               for q in PromStub.queries)
    assert any('throttlescope_bucket_tokens{dimension="msgs",level="topic",name="a/b/c"}' in q
               for q in PromStub.queries)


def test_every_prometheus_query_fills_a_history_field_and_every_rate_or_balance_has_one() -> None:
    # HistoryPoint ignores unknown fields (lenient, as every answer), so a query under a misspelt name would be
    # dropped without a word: the names are checked here instead
    assert set(data.PROMETHEUS_QUERIES) == set(HistoryPoint.model_fields) - {"t", "participants"}


def test_history_falls_back_to_the_control_plane_when_prometheus_is_down() -> None:
    conn = data.Conn(f"http://127.0.0.1:{free_port()}", None, f"http://127.0.0.1:{free_port()}")
    got = data.history(conn, 60.0)
    assert isinstance(got, data.Unavailable) and got.endpoint == "/v1/state/history"


def test_the_dashboard_imports_no_spark_no_control_plane_and_no_collectors() -> None:
    import subprocess
    import sys
    code = ("import sys; import dashboard.ui, dashboard.editors, dashboard.figures, dashboard.derive; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'controlplane', 'collectors')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


class StateStub(BaseHTTPRequestHandler):
    """A control plane whose /v1/state/buckets answer lacks a field its model requires (a version mismatch), whose
    queues are a render 7 s old (``Age``), and whose participants' view is rendered for each read."""

    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        StateStub.asked.append(urlsplit(self.path).path)
        body = {"buckets": [{"participantId": "p", "level": "topic", "name": "a/b/c", "kind": "publish"}],
                "totals": []}     # no reportedAt
        if urlsplit(self.path).path == "/v1/state/queues":
            body = {"queues": [{"participantId": "p", "level": "topic", "name": "a/b/c", "length": 1,
                                "entries": [{"producer": "x", "waiting_s": 0.5}]}],
                    "extra": "ignored by a lenient model"}
            answer_json(self, body, {"Age": "7"})
            return
        if urlsplit(self.path).path == "/v1/state/participants":
            body = {"policyVersion": 3, "reportIntervalSeconds": 1.0, "participants": [], "departed": []}
        answer_json(self, body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_state_answer_that_does_not_fit_its_model_is_an_unavailable_that_says_where() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StateStub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conn = data.Conn(f"http://127.0.0.1:{server.server_address[1]}", "t" * 20)
        got = data.bucket_totals(conn)
        assert isinstance(got, data.Unavailable) and got.status == 200
        assert "BucketsState" in got.reason and "buckets.0.reportedAt" in got.reason, got.reason
        queues = data.queues(conn)
        assert isinstance(queues, QueuesState)        # unknown fields dropped, the rest read
        assert [(q.participantId, q.length, [e.producer for e in q.entries]) for q in queues.queues] == [
            ("p", 1, ["x"])]
        # cached as the model: st.cache_data keeps it pickled and gives each read its own copy; nobody is asked
        again = data.queues(conn)
        assert again == queues and again is not queues and StateStub.asked.count("/v1/state/queues") == 1
        # how old the control plane's render was, kept through the cache; none for a view rendered for the read
        assert queues.age_s == again.age_s == 7.0
        people = data.participants(conn)
        assert people.policyVersion == 3 and people.age_s is None
    finally:
        server.shutdown()
        server.server_close()


def test_admin_paths_are_pulsar_s() -> None:
    assert data.rate_path("topic", "acme/web/clicks", "publishRate") == \
        "/admin/v2/persistent/acme/web/clicks/publishRate"
    assert data.rate_path("namespace", "acme/web", "subscriptionDispatchRate") == \
        "/admin/v2/namespaces/acme/web/subscriptionDispatchRate"
    assert data.attachment_path("acme/web", "g") == "/admin/v2/namespaces/acme/web/resourcegroup/g"
    assert data.attachment_path("acme") == "/admin/v2/tenants/acme/resourcegroup"
    assert data.mutation_quota_path("<default>", "a b") == "/admin/v2/quotas/mutations/%3Cdefault%3E/a%20b"

"""collectors.grant_connection: the grant asks' own keep-alive connection (``http.client``), against a loopback
HTTP/1.1 server that records what it gets and answers what the test tells it to."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collectors.client import GZIP_ABOVE_BYTES, ControlPlaneClient, Rejected, Unreachable
from collectors.grant_connection import GrantConnection, direct
from protocol import GrantAsk, GrantRequest

pytestmark = pytest.mark.unit

ANSWER = {"policyVersion": 7, "grants": [{"level": "topic", "name": "a/b/c", "direction": "publish", "msgs": 12.5}]}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[dict] = []          # per request: path, headers, the body as inflated
        self.connections: set[int] = set()  # client ports
        self.status, self.answer, self.gzip_answer = 200, json.dumps(ANSWER).encode(), False
        self.corrupt_gzip = False   # a body that says gzip and is not

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
        self.server.connections.add(self.client_address[1])
        out = gzip.compress(self.server.answer) if self.server.gzip_answer else self.server.answer
        if self.server.corrupt_gzip:
            out = b"\x1f\x8b" + out[2:12]   # gzip's magic, then a cut stream
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        if self.server.gzip_answer:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[_Server]:
    s = _Server()
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.shutdown()
    s.server_close()


def _request(asks: int = 0) -> GrantRequest:
    return GrantRequest(participant_id="p", asks=[GrantAsk(level="topic", name=f"a/b/t{i}", direction="publish",
                                                           wants_msgs=10) for i in range(asks)])


def test_grant_asks_go_over_one_kept_alive_connection_with_the_token(server: _Server) -> None:
    client = ControlPlaneClient(server.url, "secret")
    try:
        assert client.grants is not None
        answers = [client.grant(_request(1)) for _ in range(3)]
        assert [a.policyVersion for a in answers] == [7, 7, 7] and answers[0].grants[0].msgs == 12.5
        assert len(server.connections) == 1
        assert {r["path"] for r in server.seen} == {"/v1/grant"}
        assert server.seen[0]["headers"]["Authorization"] == "Bearer secret"
        assert json.loads(server.seen[0]["body"])["asks"][0]["name"] == "a/b/t0"
    finally:
        client.close()


def test_a_large_ask_goes_compressed_and_a_compressed_answer_is_inflated(server: _Server) -> None:
    server.gzip_answer = True
    server.answer = json.dumps({"policyVersion": 7, "grants": ANSWER["grants"] * 200}).encode()
    client = ControlPlaneClient(server.url, "secret")
    try:
        request = _request(200)
        assert len(request.model_dump_json()) > GZIP_ABOVE_BYTES
        assert len(client.grant(request).grants) == 200
        assert server.seen[0]["headers"]["Content-Encoding"] == "gzip"
        assert len(json.loads(server.seen[0]["body"])["asks"]) == 200
        # the wire counters count the bodies as they went: compressed
        assert 0 < client.grants.sent_bytes < len(server.seen[0]["body"])
        assert 0 < client.grants.received_bytes < len(server.answer)
    finally:
        client.close()


def test_an_error_answer_says_the_control_planes_reason(server: _Server) -> None:
    client = ControlPlaneClient(server.url, "wrong")
    try:
        server.status, server.answer = 401, b'{"reason": "unknown participant token"}'
        with pytest.raises(Rejected, match="HTTP 401: unknown participant token"):
            client.grant(_request())
        server.status, server.answer = 503, b"overloaded"
        with pytest.raises(Unreachable, match="HTTP 503: overloaded"):
            client.grant(_request())
        server.status, server.answer = 200, b'{"grants": "none"}'
        with pytest.raises(Unreachable, match="not a GrantAnswer"):
            client.grant(_request())
        server.answer = json.dumps(ANSWER).encode()
        server.gzip_answer, server.corrupt_gzip = True, True
        with pytest.raises(Unreachable, match="the answer says gzip and is not"):
            client.grant(_request())
        server.corrupt_gzip = False
        assert client.grant(_request()).policyVersion == 7   # on a new connection
    finally:
        client.close()


def test_an_idle_connection_is_closed_before_the_control_plane_would(server: _Server) -> None:
    conn = GrantConnection(server.url, {}, timeout_s=2.0, keepalive_expiry_s=0.0)
    try:
        for _ in range(2):
            assert conn.post("/v1/grant", b"{}", {"Content-Type": "application/json"})[0] == 200
        assert len(server.connections) == 2     # idle longer than 0 s: a new connection for the second
    finally:
        conn.close()


def test_a_url_with_a_path_keeps_it_and_a_url_that_is_not_http_is_refused(server: _Server) -> None:
    conn = GrantConnection(server.url + "/throttlescope/", {}, timeout_s=2.0)
    try:
        assert conn.post("/v1/grant", b"{}", {})[:2] == (200, "OK")
        assert server.seen[0]["path"] == "/throttlescope/v1/grant"
    finally:
        conn.close()
    with pytest.raises(ValueError, match=r"http\(s\)://host"):
        GrantConnection("ftp://example.invalid", {}, timeout_s=1.0)


def test_over_https_it_checks_the_certificate_with_the_reports_authorities(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path) -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    s = _Server()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    s.socket = server_ctx.wrap_socket(s.socket, server_side=True)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    url = s.url.replace("http://", "https://")
    try:
        unknown = ControlPlaneClient(url, "secret")   # the CA is not among certifi's
        try:
            with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
                unknown.grant(_request())
        finally:
            unknown.close()
        ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))   # httpx's way, and so the grants'
        client = ControlPlaneClient(url, "secret")
        try:
            assert client.grants is not None and client.grant(_request(1)).policyVersion == 7
            assert s.seen[-1]["headers"]["Authorization"] == "Bearer secret"
        finally:
            client.close()
    finally:
        s.shutdown()
        s.server_close()


def test_a_proxy_from_the_environment_keeps_the_grant_asks_on_httpx(server: _Server,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    assert not direct(server.url)
    client = ControlPlaneClient(server.url, "secret")
    try:
        assert client.grants is None            # httpx sends them, through the proxy it was told of
    finally:
        client.close()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert direct(server.url)

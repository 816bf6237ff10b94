"""collectors.client.ControlPlaneClient against loopback sockets: one that never answers (a grant ask's own
timeout), one that drops kept-alive connections (sent again once)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from collectors.client import ControlPlaneClient, Unreachable
from protocol import GrantRequest

pytestmark = pytest.mark.unit


def test_a_grant_ask_gives_up_after_its_own_timeout_not_the_clients() -> None:
    with socket.socket() as silent:   # listens (the kernel completes the connection) and never reads nor answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        client = ControlPlaneClient(f"http://127.0.0.1:{silent.getsockname()[1]}", "token", timeout_s=5.0)
        try:
            start = time.monotonic()
            with pytest.raises(Unreachable, match="Timeout"):
                client.grant(GrantRequest(participant_id="p", asks=[]), timeout_s=0.3)
            assert 0.25 <= time.monotonic() - start < 2.0
        finally:
            client.close()


class _DroppingServer:
    """A loopback HTTP/1.1 server that answers ``answered`` requests per connection, keeping it alive, and then
    drops the connection (a reset) on the next request without answering -- what a server closing an idle
    keep-alive connection does to a request that crosses its close."""

    def __init__(self, answered: int):
        self.answered, self.requests, self.connections = answered, 0, 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        body = b'{"policyVersion": 1, "grants": []}'
        with conn:
            buf, served = b"", 0
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                self.requests += 1
                if served >= self.answered:   # drop it: a reset, no answer
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                served += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)

    def close(self) -> None:
        self._sock.close()


def test_a_request_on_a_kept_alive_connection_the_server_dropped_is_sent_again_on_a_new_one() -> None:
    server = _DroppingServer(answered=1)
    client = ControlPlaneClient(server.url, "token")
    try:
        ask = GrantRequest(participant_id="p", asks=[])
        assert client.grant(ask).policyVersion == 1          # the first connection answers once
        assert client.grant(ask).policyVersion == 1          # then drops this one: sent again, on a new connection
        assert (server.requests, server.connections) == (3, 2)
    finally:
        client.close()
        server.close()


def test_a_server_that_drops_every_request_is_unreachable_after_one_more_try() -> None:
    server = _DroppingServer(answered=0)
    client = ControlPlaneClient(server.url, "token")
    try:
        with pytest.raises(Unreachable, match="ReadError|RemoteProtocolError|reset|closed"):
            client.grant(GrantRequest(participant_id="p", asks=[]))
        assert server.requests == 2                            # the request, and one try on a new connection
    finally:
        client.close()
        server.close()


def test_the_control_plane_keeps_an_idle_connection_open_longer_than_a_participant_does() -> None:
    # else a participant may reuse a connection the server is closing that very moment: its request is reset,
    # and one lost grant ask puts the participant on the outage rules
    from collectors.client import KEEPALIVE_EXPIRY_S
    from collectors.report_schedule import SPREAD_FROM
    from controlplane.__main__ import KEEP_ALIVE_S
    from controlplane.config import MOST_REPORT_INTERVAL_S

    assert KEEP_ALIVE_S >= 2 * KEEPALIVE_EXPIRY_S
    # and a participant keeps one across the longest interval it may be told, spread after a change: each report
    # reuses the connection of the one before
    assert KEEPALIVE_EXPIRY_S > (SPREAD_FROM + 1) * MOST_REPORT_INTERVAL_S

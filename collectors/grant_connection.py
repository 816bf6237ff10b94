"""The grant keeper's requests over one kept-alive connection of the standard library's ``http.client``.

Why not httpx, as the reports go: a grant ask is a participant's most frequent request (20-40 a second per Python
worker while a shared limit binds, one at every Spark task's start), and the keeper's thread holds the GIL for all
of the HTTP client's own Python while it builds the request and reads the answer. httpx (with httpcore and h11)
took 1.42 ms of CPU per ask, ``http.client`` 0.56 ms (loopback, against the control plane: the ``scale`` rows of
``benchmarks/bench_scale.py``; a keeper's whole round that asks, 2.15 -> 1.05 ms).
That time comes out of the task's own thread: a Spark task's first sends, which start the ask as they create their
producer, waited for it. A stream at 60 % of its limit on a 2-worker cluster spent 0.7-1.35 % of its task time
throttled with httpx, 0.48-0.63 % with this (3 runs each).

What it keeps of ``ControlPlaneClient``'s rules: the same headers (its token, gzip above ``GZIP_ABOVE_BYTES``), a
request's own timeout (per connect and per read, as httpx's), a request whose connection was dropped under it
sent again once on a new one (``DROPPED``), an answer compressed when large (it asks for gzip). It is used only
where httpx would connect directly: a URL that the environment routes through a proxy (``HTTP_PROXY``...) keeps
httpx for its grants too (``direct``). Thread-safe: one request at a time (the keeper's thread asks; a new
dispatcher's thread may fill its pools).
"""

from __future__ import annotations

import gzip
import http.client
import socket
import threading
import time
import urllib.request
import zlib
from urllib.parse import urlsplit

import httpx

__all__ = ["GrantConnection", "DROPPED", "direct"]

# a connection lost under a request: the server closed it as it sat kept alive, or reset it (RemoteDisconnected
# is a ConnectionResetError); sent again once, on a new connection
DROPPED = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, http.client.BadStatusLine,
           http.client.IncompleteRead)


def direct(url: str) -> bool:
    """Whether requests to ``url`` go straight to it (no proxy from the environment applies)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    return parts.scheme.lower() not in proxies or bool(urllib.request.proxy_bypass(parts.hostname or ""))


class GrantConnection:
    """POSTs to the control plane at ``url`` over one kept-alive HTTP/1.1 connection (see the module essay).
    ``sent_bytes``/``received_bytes``: the bodies as they went over the wire, since it was made."""

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float, keepalive_expiry_s: float = 5.0):
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the control plane's URL must be http(s)://host[:port][/path], got {url!r}")
        self._https = parts.scheme.lower() == "https"
        self._host, self._port = parts.hostname, parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._headers = {**headers, "Accept-Encoding": "gzip", "Connection": "keep-alive"}
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None
        # an idle connection is closed after this: the control plane keeps one open far longer, so it never closes
        # one this side is about to reuse
        self.keepalive_expiry_s, self._used_at = keepalive_expiry_s, 0.0
        self._lock = threading.Lock()
        self.sent_bytes = self.received_bytes = 0

    def post(self, path: str, content: bytes, headers: dict[str, str], timeout_s: float | None = None
             ) -> tuple[int, str, bytes]:
        """(status, reason phrase, inflated body) of POST ``path``; raises ``OSError`` or
        ``http.client.HTTPException`` when no answer comes (a dropped connection is tried once more)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            try:
                try:
                    return self._exchange(path, content, headers, timeout)
                except DROPPED:
                    self._drop()
                    return self._exchange(path, content, headers, timeout)
            except BaseException:
                self._drop()   # a timeout, a refusal, a garbled answer: the next request starts on a new connection
                raise

    def _exchange(self, path: str, content: bytes, headers: dict[str, str], timeout_s: float
                  ) -> tuple[int, str, bytes]:
        if self._conn is not None and time.monotonic() - self._used_at > self.keepalive_expiry_s:
            self._drop()
        conn = self._conn
        if conn is None:
            conn = self._conn = self._connect(timeout_s)
        elif conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        conn.timeout = timeout_s
        conn.request("POST", self._prefix + path, body=content, headers={**self._headers, **headers})
        resp = conn.getresponse()
        body = resp.read()
        self._used_at = time.monotonic()
        self.sent_bytes += len(content)
        self.received_bytes += len(body)
        if resp.will_close:
            self._drop()
        if (resp.getheader("Content-Encoding") or "").strip().lower() == "gzip":
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError, zlib.error) as e:
                raise http.client.HTTPException(f"the answer says gzip and is not: {e}") from None
        return resp.status, resp.reason, body

    def _connect(self, timeout_s: float) -> http.client.HTTPConnection:
        if self._https:
            # (httpx's context: the same certificate authorities as the reports' client -- certifi, SSL_CERT_FILE)
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout_s, context=httpx.create_ssl_context())
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)
        conn.connect()
        # (http.client writes a bytes body with its headers at once; nothing small then waits on Nagle's algorithm)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._drop()

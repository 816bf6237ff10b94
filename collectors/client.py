"""HTTP to the control plane (httpx; grant asks over ``http.client``), and the backoff between failed attempts.

``ControlPlaneClient.report(report)`` POSTs one ``protocol.Report`` to ``/v1/report`` and returns the parsed
``ReportResponse``; ``grant(request)`` does the same for ``/v1/grant``, over a connection of its own
(``collectors.grant_connection``: the standard library's ``http.client``, 0.4 of httpx's CPU per ask, which on
Spark comes out of the tasks' own threads). Every failure becomes a ``ControlPlaneError`` whose message says what
happened, so the reporter has one thing to catch: ``Unreachable`` (connection refused, timeout, 5xx, an answer that
is not the schema) or ``Rejected`` (401/403/4xx: a wrong token or an incompatible report -- retrying will not fix
it until someone does, but the reporter keeps retrying at the backoff cap, so fixing the control plane's side
suffices).
Timeouts are short (about 2 report intervals, 0.5..5 s): the reporter thread must not hang, the hot path never
waits on it anyway. A body larger than ``GZIP_ABOVE_BYTES`` goes gzip-compressed (level 1: the report of a
participant with 5,000 limits is ~3 MB of JSON, ~0.5 MB compressed, in ~50 ms of its reporter thread; the common
report of a few limits is a few kilobytes and goes as it is); answers come compressed when large (httpx asks
for and inflates them).

``Backoff``: exponential from the report interval, capped, with jitter -- attempt k waits
``min(cap, base * 2**(k-1)) * uniform(0.5, 1)``, so participants that lost the control plane together do not
come back in lockstep.
"""

from __future__ import annotations

import gzip
import http.client
import json
import random
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from protocol import Goodbye, GrantAnswer, GrantRequest, Report, ReportResponse

from . import grant_connection

A = TypeVar("A", bound=BaseModel)
GZIP_ABOVE_BYTES = 8 * 1024
# an idle kept-alive connection is closed after this: longer than the longest interval a participant is told to
# report at (30 s, and after a change up to one and a half of it), so that a report reuses the connection of the
# one before. At httpx's default, 5 s, every report at an interval over 5 s came on a new connection: 5,000
# participants of ten limits told 6 s took 71 % of the control plane's core at a p99 of 694 ms, against 51 % and
# 5 ms on kept connections. The control plane keeps one open longer still (``controlplane.__main__.KEEP_ALIVE_S``),
# so it never closes one a participant is about to reuse
KEEPALIVE_EXPIRY_S = 50.0
DROPPED = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)   # a connection lost under a request

__all__ = ["ParticipantClient", "ControlPlaneClient", "ControlPlaneError", "Unreachable", "Rejected", "Backoff",
           "encoded", "GZIP_ABOVE_BYTES"]


class ControlPlaneError(Exception):
    """A report could not be delivered, or its answer not used."""


class Unreachable(ControlPlaneError):
    """No usable answer: connection refused or reset, timeout, 5xx, or a malformed answer."""


class Rejected(ControlPlaneError):
    """The control plane refused the report (401/403: the token; 413/422: the report)."""

    def __init__(self, status: int, reason: str):
        self.status = status
        super().__init__(f"HTTP {status}: {reason}")


def encoded(body: bytes) -> tuple[bytes, dict[str, str]]:
    """The JSON ``body`` as sent (gzip-compressed above ``GZIP_ABOVE_BYTES``) and its headers."""
    if len(body) <= GZIP_ABOVE_BYTES:
        return body, {"Content-Type": "application/json"}
    return gzip.compress(body, compresslevel=1), {"Content-Type": "application/json", "Content-Encoding": "gzip"}


def _reason(body: bytes, phrase: str) -> str:
    """What an error answer says: its JSON's ``reason``, else the start of its text, else the status phrase."""
    try:
        said = json.loads(body)
        if isinstance(said, dict) and isinstance(said.get("reason"), str):
            return said["reason"][:500]
    except ValueError:   # (not JSON, or not UTF-8)
        pass
    return body[:200].decode("utf-8", "replace") or phrase


def _answer(status: int, phrase: str, body: bytes, answer: type[A]) -> A:
    """The parsed ``answer`` of a request that got HTTP ``status``, or the ``ControlPlaneError`` it makes."""
    if status >= 500:
        raise Unreachable(f"HTTP {status}: {_reason(body, phrase)}")
    if status != 200:
        raise Rejected(status, _reason(body, phrase))
    try:
        return answer.model_validate_json(body)
    except ValidationError as e:
        raise Unreachable(f"the answer is not a {answer.__name__}: {e.error_count()} error(s), first: "
                          f"{e.errors()[0]['msg']}") from None


class ParticipantClient(Protocol):
    """What a participant needs of the control plane: ``ControlPlaneClient`` over HTTP (tests and benchmarks pass
    an in-process one). ``report`` and ``grant`` raise ``ControlPlaneError`` when it cannot answer."""

    url: str
    timeout_s: float

    def report(self, report: Report) -> ReportResponse: ...

    def grant(self, request: GrantRequest, timeout_s: float | None = None) -> GrantAnswer: ...

    def goodbye(self, participant_id: str, timeout_s: float = 0.5) -> bool: ...

    def close(self) -> None: ...


class ControlPlaneClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = 2.0,
                 transport: httpx.BaseTransport | None = None):
        headers = {"User-Agent": "throttlescope-participant"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.url = url
        # (a plain-http control plane needs no TLS context: loading the CA bundle for it took 30-60 ms of every new
        # Python worker's start, which on Spark delays its first send -- after an executor is lost, a whole task's)
        self._http = httpx.Client(base_url=url, headers=headers, timeout=timeout_s, transport=transport,
                                  limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
                                  verify=not url.lower().startswith("http://"))
        # grant asks on a connection of their own (see the module essay), unless a transport was given (its requests
        # must all go through it) or a proxy from the environment applies to the URL (httpx honours it)
        self.grants: grant_connection.GrantConnection | None = None
        if transport is None and grant_connection.direct(url):
            self.grants = grant_connection.GrantConnection(url, headers, timeout_s, KEEPALIVE_EXPIRY_S)

    @property
    def timeout_s(self) -> float:
        return self._http.timeout.read or 0.0

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self._http.timeout = httpx.Timeout(value)
        if self.grants is not None:
            self.grants.timeout_s = value

    def report(self, report: Report) -> ReportResponse:
        return self._post("/v1/report", report, ReportResponse)

    def grant(self, request: GrantRequest, timeout_s: float | None = None) -> GrantAnswer:
        """Ask for tokens of shared limits, or give them back (thread-safe: the grant keeper's thread calls it);
        ``timeout_s``: this request's own timeout (default: the client's)."""
        return self._post("/v1/grant", request, GrantAnswer, timeout_s, own=self.grants)

    def _post(self, path: str, body: BaseModel, answer: type[A], timeout_s: float | None = None,
              own: grant_connection.GrantConnection | None = None) -> A:
        """POST ``body`` over httpx, or over ``own`` connection if given; the parsed ``answer``."""
        content, headers = encoded(body.model_dump_json(exclude_none=True).encode())
        failures = (OSError, http.client.HTTPException) if own is not None else (httpx.HTTPError,)
        try:
            if own is not None:
                status, phrase, raw = own.post(path, content, headers, timeout_s)
            else:
                resp = self._sent(path, content, headers, httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s)
                status, phrase, raw = resp.status_code, resp.reason_phrase, resp.content
        except failures as e:
            raise Unreachable(f"{type(e).__name__}: {e or 'no detail'}") from None
        return _answer(status, phrase, raw, answer)

    def _sent(self, path: str, content: bytes, headers: dict[str, str], timeout: Any) -> httpx.Response:
        # a connection dropped under a request (the server closed it as it sat kept alive, or reset it) is tried
        # once more on a new one: else one lost grant ask puts a participant on the outage rules for a backoff.
        # Sending again is safe: a report repeats its sequence number, and a grant granted twice is the first
        # one's tokens never spent (below the limit, not above it)
        try:
            return self._http.post(path, content=content, headers=headers, timeout=timeout)
        except DROPPED:
            return self._http.post(path, content=content, headers=headers, timeout=timeout)

    def goodbye(self, participant_id: str, timeout_s: float = 0.5) -> bool:
        """Leave at once; True if the control plane removed us. Never raises."""
        try:
            resp = self._sent("/v1/goodbye", Goodbye(participant_id=participant_id).model_dump_json().encode(),
                              {"Content-Type": "application/json"}, timeout_s)
        except Exception:  # noqa: BLE001 - best effort at exit
            return False
        return resp.status_code == 204

    def close(self) -> None:
        self._http.close()
        if self.grants is not None:
            self.grants.close()


class Backoff:
    """Exponential backoff with jitter: attempt k waits ``min(cap, base * 2**(k-1)) * uniform(0.5, 1)``."""

    def __init__(self, base_s: float, cap_s: float, rng: Callable[[], float] = random.random):
        if not (0 < base_s <= cap_s):
            raise ValueError(f"backoff needs 0 < base_s <= cap_s, got base_s={base_s!r}, cap_s={cap_s!r}")
        self.base_s, self.cap_s, self._rng = base_s, cap_s, rng
        self.failures = 0

    def next_delay_s(self) -> float:
        self.failures += 1
        ceiling = min(self.cap_s, self.base_s * 2 ** min(self.failures - 1, 60))
        return ceiling * (0.5 + 0.5 * self._rng())

    def reset(self) -> None:
        self.failures = 0

"""What every route needs, passed in through ``app.state.ctx`` (no module globals): store, live state, settings,
principals."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from controlplane import policyset
from controlplane.config import Settings
from controlplane.grants import GrantBook
from controlplane.loop_lag import LoopLag
from controlplane.middleware import actor_of
from controlplane.principals import Directory
from controlplane.renders import Renders
from controlplane.report_pace import ReportPace
from controlplane.shared_reports import ReportStream
from controlplane.state import LiveState
from controlplane.store import AuditInfo, Change, Reader, Store
from protocol import PolicySet

VERSION_HEADER = "X-Policy-Version"
STATE_SHARE = 0.1   # of a core: what rendering the views that grow with participants x limits may take, together
IGNORED_HEADER = "X-Ignored-Fields"


@dataclass
class Context:
    settings: Settings
    store: Store
    live: LiveState
    directory: Directory
    grants: GrantBook
    pace: ReportPace   # the report interval told to participants (controlplane.report_pace)
    lag: LoopLag = field(default_factory=LoopLag)   # how far behind the loop is (controlplane.loop_lag)
    # replicas: accepted reports and goodbyes passed to the others through Redis (controlplane.shared_reports)
    reports: ReportStream | None = None
    # the big /v1/state/* views, rendered on the loop and held to a share of a core (controlplane.renders)
    views: Renders = field(default_factory=lambda: Renders(share=STATE_SHARE))
    started_monotonic: float = field(default_factory=time.monotonic)
    given_up: int = 0   # reports not worked on: they waited longer than their senders wait (api_participant)
    _cache: PolicySet | None = None
    _cache_lock: threading.Lock = field(default_factory=threading.Lock)
    _rendered: tuple[PolicySet, bytes] | None = None   # the last document answers carried, as JSON

    def policies(self) -> PolicySet:
        """The current policy document (rebuilt only when the version moved)."""
        version = self.store.policy_version()
        with self._cache_lock:
            if self._cache is not None and self._cache.version == version:
                return self._cache
        ps = self.store.read(policyset.build)
        with self._cache_lock:
            if self._cache is None or ps.version >= self._cache.version:
                self._cache = ps
        return ps

    def policies_json(self, ps: PolicySet) -> bytes:
        """``ps`` as JSON, rendered once for all the answers that carry it: participants whose answers did not reach
        them (timed out under load) are sent the whole document with every report, and rendering it each time took
        half the control plane's CPU at 5,000 participants of 250 jobs' limits."""
        rendered = self._rendered
        if rendered is not None and rendered[0] is ps:
            return rendered[1]
        data = ps.model_dump_json().encode()
        self._rendered = (ps, data)
        return data

    def change(self, request: Request, kind: str, key: str, value: Any,
               check: Callable[[Reader, Any], None] | None = None) -> Change:
        """One audited, versioned change (see Store.change) in the name of the authenticated principal."""
        return self.store.change(kind, key, value, audit_of(request), check)

    def update(self, request: Request, kind: str, key: str, new: Callable[[Reader, Any], Any]) -> Change:
        """One audited, versioned read-modify-write (see Store.update) in the name of the authenticated principal."""
        return self.store.update(kind, key, new, audit_of(request))


def audit_of(request: Request) -> AuditInfo:
    """Who did what, as the guard authenticated it (never a name the caller declares)."""
    return AuditInfo(actor=actor_of(request), method=request.method, endpoint=request.url.path)


async def get_ctx(request: Request) -> Context:
    return request.app.state.ctx  # async: a plain function would be run in the thread pool for every request


def done(change: Change, created: bool = False, body: Any = None, ignored: list[str] | None = None) -> Response:
    """204 No Content (201 with the stored value when ``created``), with the new policy version in a header, and
    the body's ``ignored`` unknown fields (if any) in another."""
    headers = {VERSION_HEADER: str(change.version)}
    if ignored:
        headers[IGNORED_HEADER] = ignored_header(ignored)
    if created:
        return JSONResponse(body, status_code=201, headers=headers)
    return Response(status_code=204, headers=headers)


def ignored_header(names: list[str], max_chars: int = 512) -> str:
    """The ignored field names as one header value: printable ASCII only, comma-separated, bounded."""
    text = ", ".join("".join(c for c in name if " " <= c <= "~" and c != ",") or "?" for name in names)
    return text if len(text) <= max_chars else text[:max_chars - 3] + "..."

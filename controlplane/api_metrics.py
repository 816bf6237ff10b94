"""``GET /metrics``: the participants' latest reports in Prometheus text format, rendered at scrape time.

How it works
------------
``install(app, live, policies, grants)`` builds one ``metrics.collector.ThrottlescopeCollector`` over the live
state and the grant book (a resource group's calculated quota is what the book grants), registers it on a
registry of its own (no global default registry: one app, one registry, tests build many), makes it the live
state's listener (so counters keep the totals of participants that leave or restart), and adds the route.
``ReportTimer``, a small ASGI middleware ``controlplane.app`` places inside the guard, times every
``POST /v1/report`` into the report-latency histogram (parsing and validation included: the whole handling, after
the guard's authorisation).

A scrape is rendered on the event loop a piece at a time, and at most so often (``controlplane.scrapes``): on a
worker thread, as a plain endpoint runs, it held up the reports for its whole length.

Auth: ``/metrics`` is a read, so the guard's one rule applies (access.need): open when reads are open
(``--open-reads``), otherwise any principal's token (the participant's, a viewer's) as ``Authorization: Bearer
<token>``; in Prometheus, ``authorization: {type: Bearer, credentials_file: <data dir>/participant.token}`` (see
deploy/prometheus.yml and docs/metrics.md).

Per-topic labels: ``THROTTLESCOPE_METRICS_TOPIC_LABELS=0`` (``Settings.metrics_topic_labels``, passed in as
``topic_labels``) folds topic and subscription names into ``"*"``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as CONTENT_TYPE
from starlette.types import ASGIApp, Receive, Scope, Send

from controlplane.api_participant import REPORT_PATH
from controlplane.renders import streamed
from controlplane.scrapes import Scrapes
from controlplane.state import LiveState
from metrics.allocation import ShareSource
from metrics.collector import ThrottlescopeCollector
from protocol import PolicySet

__all__ = ["router", "install", "ReportTimer"]

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, summary="Prometheus metrics (text format 0.0.4)",
            description="Every metric of docs/metrics.md, rendered from the live participants' latest reports. "
                        "Open when reads are open; otherwise any principal's token.",
            responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format"}})
async def metrics(request: Request) -> Response:
    return streamed(await request.app.state.metrics_scrapes.text(), CONTENT_TYPE)


class ReportTimer:
    """ASGI middleware: observe how long each ``POST /v1/report`` took to handle."""

    def __init__(self, app: ASGIApp, observe: Callable[[float], None]) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != REPORT_PATH:
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            self.observe(time.perf_counter() - start)


def install(app: FastAPI, live: LiveState, policies: Callable[[], PolicySet], grants: ShareSource | None = None,
            topic_labels: bool = True) -> ThrottlescopeCollector:
    """Add ``/metrics`` to ``app``; the collector it reads, whose ``observe_report_latency`` the report timer
    (``ReportTimer``, placed by ``controlplane.app`` inside the guard) is given."""
    collector = ThrottlescopeCollector(live, policies, topic_labels=topic_labels, grants=grants)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    live.listener = collector
    app.state.metrics_registry = registry
    app.state.metrics_collector = collector
    app.state.metrics_scrapes = Scrapes(collector)
    app.include_router(router)
    return collector

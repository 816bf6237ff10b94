"""``create_app(settings, tokens)``: the FastAPI application, everything passed in (no globals).

Tests build one app per data directory; ``python -m controlplane`` builds one and serves it with uvicorn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp

from controlplane import (
    access,
    api_broker,
    api_groups,
    api_metrics,
    api_participant,
    api_policies,
    api_principals,
    api_state,
    api_tenants,
    errors,
)
from controlplane.auth import Tokens
from controlplane.config import Settings, package_version
from controlplane.context import Context
from controlplane.grant_tables import RedisTable
from controlplane.grants import GrantBook
from controlplane.loop_lag import LoopLag
from controlplane.middleware import ANSWER_GZIP_ABOVE_BYTES, GuardMiddleware
from controlplane.principals import Directory
from controlplane.report_pace import ReportPace
from controlplane.shared_reports import ReportFollower, ReportStream
from controlplane.state import LiveState
from controlplane.store import Store

DESCRIPTION = """\
throttlescope control plane. Admin endpoints follow Apache Pulsar's REST shapes under `/admin/v2`; participants
(Spark Python workers) use `/v1/report`; the dashboard reads `/v1/state/*`.

Auth: `Authorization: Bearer <token>` of a principal (`/v1/whoami` says which). Roles, after Apache Pulsar's:
a super-user may do everything; a tenant admin changes the namespace and topic policies of the tenants whose
`adminRoles` name it (`/admin/v2/tenants/{tenant}`); a viewer reads; a participant reports (`/v1/report`,
`/v1/goodbye`) and reads; a proxy acts for the principal it names in `X-Original-Principal`. Resource groups,
their attachments, tenants, broker settings, mutation quotas and principals are super-user only. Each operation's
`x-required-role` says what it needs (401 without a token, 403 with one that is not enough); reads need any
principal unless the operator opened them. Every change bumps the policy version (`X-Policy-Version` header) and
is written to the audit log under the authenticated principal's name. Errors are `{"reason": "..."}`.

Limits: a number >= 0, or -1 for unlimited (0 also disables a rate, as in Pulsar). Names: letters, digits and
`- = : . _`, 1..256 characters. Bodies above 1 MiB get 413. As in Pulsar, unknown body fields are ignored (named
in the `X-Ignored-Fields` header), a policy that is not set reads as 204 with no body, and precondition failures
(a resource group in use or missing, an unknown broker setting or value) are 412. docs/pulsar-compatibility.md
sets Pulsar's admin contract beside this one, operation by operation.
"""


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "a principal's token (python -m controlplane principals create ...)"}}
            schemas = schema["components"].setdefault("schemas", {})
            for unused in ("HTTPValidationError", "ValidationError"):
                schemas.pop(unused, None)
            schemas["Error"] = {"type": "object", "title": "Error", "required": ["reason"],
                                "properties": {"reason": {"type": "string",
                                                          "description": "What is wrong and what is allowed"}}}
            error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
            for path, ops in schema.get("paths", {}).items():
                for method, op in ops.items():
                    need = access.need(method, path).kind
                    op["x-required-role"] = need
                    op["security"] = [] if need == "open" else [{"bearer": []}]
                    responses = op.setdefault("responses", {})
                    if need != "open":
                        responses.setdefault("401", {"description": "No bearer token"})
                        responses.setdefault("403", {"description": "An unknown or revoked token, or a principal "
                                                                    "whose role may not do this"})
                    if "requestBody" in op:
                        responses.setdefault("400", {"description": "JSON nested deeper than 32 levels, or a "
                                                                    "Content-Length that is not a number"})
                        responses.setdefault("413", {"description": "Body larger than 1 MiB"})
                    for code, response in responses.items():
                        if code.isdigit() and int(code) >= 400:
                            response["content"] = error
                            if code == "422":
                                response["description"] = "Invalid input (path, query or body)"
            app.openapi_schema = schema
        return app.openapi_schema
    return build


# FastAPI's OpenTelemetry bridge off: the metrics are Prometheus's (/metrics), and with it on FastAPI asked
# OpenTelemetry for its three providers on every request, some 15 microseconds a grant ask (a FastAPI without the
# setting takes it as an extra and ignores it)
NO_TELEMETRY = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}


class ControlPlaneApp(FastAPI):
    """FastAPI, with ``front`` wrapped around its whole middleware stack: the guard, the report timer and the
    participants' fast path (``api_participant.ParticipantFastPath``) run before FastAPI's own layers (its error,
    telemetry and body-limit middleware, gzip, the exception handlers), which every other request and every
    report or grant ask the fast path passes on still goes through. Those layers, with the OpenTelemetry bridge,
    took a fifth of a grant ask's CPU in the application (110 against 86 microseconds), at 2,000 asks a second
    beside 500-1,000 reports: a cell at 81-92 % of a core, whose p99 read anywhere from 43 ms to over a second
    (26 ms since, its reports told 1 s instead of 2)."""

    front: Callable[[ASGIApp], ASGIApp] | None = None

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        return stack if self.front is None else self.front(stack)


def create_app(settings: Settings, tokens: Tokens, store: Store | None = None,
               live: LiveState | None = None, grants: GrantBook | None = None) -> FastAPI:
    store = store if store is not None else Store(settings.data_dir)
    live = live if live is not None else LiveState(settings.report_interval_s)
    if grants is None:
        # replicas: the windows in Redis, on the wall clock every replica shares (controlplane.grant_tables)
        replicas = settings.redis_url is not None
        grants = GrantBook(settings.report_interval_s, settings.data_dir,
                           clock=time.time if replicas else time.monotonic,
                           table=RedisTable(settings.redis_url) if replicas else None,
                           asks_budget_per_s=settings.grant_asks_per_s)

    # replicas: every replica's live state is the whole platform's (controlplane.shared_reports)
    reports = ReportStream(settings.redis_url) if settings.redis_url else None
    follower = ReportFollower(reports, live) if reports is not None else None

    lag = LoopLag()   # the reports' wait for the loop, measured for their pace (controlplane.loop_lag)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if follower is not None:
            follower.start()
        probe = asyncio.create_task(lag.run())
        yield
        probe.cancel()
        if follower is not None:
            follower.stop()
        store.close()

    app = ControlPlaneApp(title="throttlescope control plane", version=package_version(), description=DESCRIPTION,
                          lifespan=lifespan, telemetry=NO_TELEMETRY)
    directory = Directory(store, tokens)
    pace = ReportPace(settings.report_interval_s, settings.report_interval_most_s, settings.report_cpu_share,
                      waits=lag.take)
    app.state.ctx = Context(settings=settings, store=store, live=live, directory=directory, grants=grants,
                            pace=pace, lag=lag, reports=reports)
    errors.install(app)
    for module in (api_participant, api_groups, api_policies, api_broker, api_tenants, api_principals,
                   api_state):  # reports: matched first
        app.include_router(module.router)
    collector = api_metrics.install(app, live, app.state.ctx.policies, grants,
                                    topic_labels=settings.metrics_topic_labels)

    def front(stack: ASGIApp) -> ASGIApp:   # guard -> report timer -> the participants' fast path -> FastAPI's own
        return GuardMiddleware(
            api_metrics.ReportTimer(api_participant.ParticipantFastPath(stack, ctx=app.state.ctx),
                                    observe=collector.observe_report_latency),
            directory=directory, open_reads=settings.open_reads, max_body_bytes=settings.max_body_bytes,
            max_json_depth=settings.max_json_depth, max_inflated_bytes=settings.max_inflated_bytes)
    app.front = front
    # inside the front: an answer of more than a kilobyte (a policy document of thousands of limits, a state view)
    # is gzip-compressed for a client that accepts it (httpx and Prometheus do); level 1, as the participants send:
    # a tenth of level 9's CPU for a body a fifth larger (the fast path compresses its own: api_participant)
    app.add_middleware(GZipMiddleware, minimum_size=ANSWER_GZIP_ABOVE_BYTES, compresslevel=1)
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    return app

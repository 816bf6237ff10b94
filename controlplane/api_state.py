"""Live state for the dashboard (read token unless reads are open) and the health check (always open)."""

import time
from collections.abc import Callable, Hashable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel

from controlplane import views
from controlplane.config import package_version
from controlplane.context import Context, get_ctx
from controlplane.json_pieces import json_pieces
from controlplane.renders import Pieces, streamed
from controlplane.state import HISTORY_S, LEVEL_ORDER
from protocol.state import (
    AdaptiveTraceState,
    BucketsState,
    HistoryState,
    ParticipantsState,
    QueuesState,
    ResourceGroupsState,
    SharedState,
)

router = APIRouter(tags=["state"])
Ctx = Annotated[Context, Depends(get_ctx)]


def view_pieces(steps: views.Steps[Any]) -> Pieces:
    """A view built by its ``steps``, then sent as JSON in pieces (``controlplane.json_pieces``); None at each
    pause."""
    view = yield from steps
    yield from json_pieces(view.model_dump(mode="json") if isinstance(view, BaseModel) else view)


async def _stepwise(ctx: Context, key: Hashable, steps: Callable[[], views.Steps[Any]]) -> Response:
    """A view built a step at a time and sent a piece at a time on the event loop, at most so often
    (``controlplane.renders``: a dashboard polling every 2 s at 1,000 participants of 100 limits held up every
    report for seconds when these ran on worker threads). The response model stays the endpoint's declared one."""
    return streamed(await ctx.views.answer(key, lambda: view_pieces(steps())), "application/json")


@router.get("/healthz", summary="Ready check, with version information (no token needed)")
def healthz(ctx: Ctx, request: Request) -> dict[str, Any]:
    scrapes = request.app.state.metrics_scrapes   # (controlplane.scrapes)
    return {"status": "ok", "service": "throttlescope-controlplane", "version": package_version(),
            "schemaVersion": ctx.store.schema_version, "policyVersion": ctx.store.policy_version(),
            "reportIntervalSeconds": ctx.live.told_s,
            # the report pace's last window (controlplane.report_pace): None until one is measured
            "reportCpuSeconds": ctx.pace.cpu_per_report_s, "reportWaitP99Seconds": ctx.pace.wait_p99_s,
            "reportsGivenUp": ctx.given_up,
            "scrapeCpuSeconds": scrapes.latest_cpu_s,   # the last /metrics render's (None before the first)
            "uptimeSeconds": time.monotonic() - ctx.started_monotonic}


@router.get("/v1/state/participants", response_model=ParticipantsState,
            summary="Live participants (and recently departed ones)")
async def participants(ctx: Ctx) -> Response:
    version = ctx.store.policy_version()
    return await _stepwise(ctx, ("participants", version), lambda: views.participant_steps(ctx.live, version))


@router.get("/v1/state/buckets", response_model=BucketsState,
            summary="Latest bucket snapshots per level, per participant and summed")
async def buckets(ctx: Ctx, rows: Annotated[bool, Query(
        description="false: the totals only, no row per participant (the rows grow with participants x limits: "
                    "21.7 MB at 1,000 participants of 100 limits)")] = True) -> Response:
    return await _stepwise(ctx, ("buckets", rows), lambda: views.bucket_steps(ctx.live, rows))


@router.get("/v1/state/queues", response_model=QueuesState, summary="Latest fairness-queue snapshots (head first)")
async def queues(ctx: Ctx) -> Response:
    return await _stepwise(ctx, "queues", lambda: views.queue_steps(ctx.live))


@router.get("/v1/state/resourcegroups", response_model=ResourceGroupsState,
            summary="Per resource group: configured quota, attachments, per-participant usage, demand and allocation",
            description="A participant's allocation is its fair rate from the grant book (as in /v1/state/shared) "
                        "when it asked for grants of the group in the window; otherwise PIP-82's usage-based split "
                        "of what the grant holders leave.")
async def resource_groups(ctx: Ctx) -> Response:
    ps = ctx.policies()
    return await _stepwise(ctx, ("resourcegroups", ps.version),
                           lambda: views.resource_group_steps(ctx.live, ps, ctx.grants))


@router.get("/v1/state/history", response_model=HistoryState,
            summary="Per limiter, the last minutes at report resolution (in memory)")
async def history(ctx: Ctx,
                  level: Annotated[str | None, Query(pattern="^(" + "|".join(LEVEL_ORDER) + ")$")] = None,
                  name: Annotated[str | None, Query(min_length=1, max_length=512)] = None,
                  seconds: Annotated[float, Query(gt=0, le=HISTORY_S)] = HISTORY_S) -> Response:
    return await _stepwise(ctx, ("history", level, name, seconds),
                           lambda: ctx.live.history_steps(level, name, seconds))


@router.get("/v1/state/shared", response_model=SharedState,
            summary="Per shared limit: each participant's demand, usage and share, and the limit's utilisation",
            description="Joins every live participant's latest usage and demand per shared limit (POST /v1/report) "
                        "with the grants of POST /v1/grant: per participant its max-min fair rate and the tokens "
                        "granted to it in the last window; per limit the limit now ('unlimited' when not limited), "
                        "what was admitted and granted in all, and the utilisation (admitted / limit).")
async def shared(ctx: Ctx, participants: Annotated[bool, Query(
        description="false: the summary per limit, no participant listed (participantCount says how many)")] = True,
        key: Annotated[list[str] | None, Query(
            description="Only these limits (repeat it for several): limit_key(level, direction, name)",
            max_length=100)] = None) -> Response:
    ps = ctx.policies()
    only = None if key is None else tuple(sorted(set(key)))
    return await _stepwise(ctx, ("shared", ps.version, participants, only),
                           lambda: views.shared_steps(ctx.live, ps, ctx.grants, ctx.grants.learning, participants,
                                                      only))


@router.get("/v1/state/adaptive", response_model=AdaptiveTraceState,
            summary="Per adaptive limit, the rate it learnt over the last 15 minutes (in memory)",
            description="One point a second while participants ask for its grants: the rate learnt from the sink's "
                        "answers (0 while the sink asked for a pause), the configured ceiling, and the sends the sink "
                        "took and refused per second (as the participants reported them with their asks).")
def adaptive(ctx: Ctx) -> AdaptiveTraceState:
    return views.adaptive(ctx.grants.adaptive_trace())

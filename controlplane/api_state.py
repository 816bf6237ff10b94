"""Live state for the dashboard (read token unless reads are open) and the health check (always open)."""

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from controlplane.config import package_version
from controlplane.context import Context, get_ctx
from controlplane.state import HISTORY_S, LEVEL_ORDER

router = APIRouter(tags=["state"])
Ctx = Annotated[Context, Depends(get_ctx)]


@router.get("/healthz", summary="Ready check, with version information (no token needed)")
def healthz(ctx: Ctx) -> dict[str, Any]:
    return {"status": "ok", "service": "throttlescope-controlplane", "version": package_version(),
            "schemaVersion": ctx.store.schema_version, "policyVersion": ctx.store.policy_version(),
            "reportIntervalSeconds": ctx.settings.report_interval_s,
            "uptimeSeconds": time.monotonic() - ctx.started_monotonic}


@router.get("/v1/state/participants", summary="Live participants (and recently departed ones)")
def participants(ctx: Ctx) -> dict[str, Any]:
    return ctx.live.participants(ctx.store.policy_version())


@router.get("/v1/state/buckets", summary="Latest bucket snapshots per level, per participant and summed")
def buckets(ctx: Ctx) -> dict[str, Any]:
    return ctx.live.buckets()


@router.get("/v1/state/queues", summary="Latest fairness-queue snapshots (head first)")
def queues(ctx: Ctx) -> dict[str, Any]:
    return ctx.live.queues()


@router.get("/v1/state/resourcegroups",
            summary="Per resource group: configured quota, attachments, per-participant usage, demand and allocation")
def resource_groups(ctx: Ctx) -> dict[str, Any]:
    return ctx.live.resource_groups(ctx.policies())


@router.get("/v1/state/history", summary="Per limiter, the last minutes at report resolution (in memory)")
def history(ctx: Ctx,
            level: Annotated[str | None, Query(pattern="^(" + "|".join(LEVEL_ORDER) + ")$")] = None,
            name: Annotated[str | None, Query(min_length=1, max_length=512)] = None,
            seconds: Annotated[float, Query(gt=0, le=HISTORY_S)] = HISTORY_S) -> dict[str, Any]:
    return ctx.live.history(level, name, seconds)

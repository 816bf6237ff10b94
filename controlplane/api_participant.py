"""Participant endpoints: one report in, the policy version (policies when moved) and the usage map out."""

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from controlplane.context import Context, get_ctx
from controlplane.errors import not_found
from metrics.report import Goodbye, PolicySet, Report, ReportResponse, limit_key

router = APIRouter(prefix="/v1", tags=["participants"])
Ctx = Annotated[Context, Depends(get_ctx)]


@router.post("/report", response_model=ReportResponse, summary="Report usage and state; get policies and usage",
             description="Needs the participant (or admin) token. The answer carries the full policy document only "
                         "when applied_policy_version differs from the current version, and, for every shared limit "
                         "in the report's usage or usage_unchanged, every live participant's usage and demand (a "
                         "participant's unchanged entries keep the values it sent last). A stale or "
                         "out-of-sequence report is answered with accepted=false and stores nothing.",
             responses={422: {"description": "Malformed report; nothing stored"}})
async def report(body: Report, ctx: Ctx) -> Response:
    # async: in-memory work (and one SQLite read), run on the event loop. In the thread pool, hundreds of reports
    # a second convoy on the GIL with the loop's own I/O and queue up for seconds (benchmarks/bench_load.py).
    accepted, reason = ctx.live.ingest(body)
    policies = ctx.policies()
    keys = [limit_key(u.level, u.direction, u.name) for u in body.usage] + list(body.usage_unchanged)
    answer = ReportResponse(
        policyVersion=policies.version,
        policies=policies if body.applied_policy_version != policies.version else None,
        usage=ctx.live.usage_map(keys),
        reportIntervalSeconds=ctx.settings.report_interval_s,
        accepted=accepted, reason=reason)
    # serialised here: FastAPI would validate the model it was just built from again (response_model documents it)
    return Response(answer.model_dump_json(), media_type="application/json")


@router.post("/goodbye", status_code=204, summary="Leave at once (removes the participant and its usage)",
             responses={204: {"description": "Removed"}, 404: {"description": "Not a live participant"}})
async def goodbye(body: Goodbye, ctx: Ctx) -> Response:
    if not ctx.live.goodbye(body.participant_id):
        raise not_found(f"participant {body.participant_id!r} is not live (never reported, or already removed)")
    return Response(status_code=204)


@router.get("/policies", response_model=PolicySet, summary="The current policy document",
            description="The same document /v1/report returns when the policy version moved.")
def policies(ctx: Ctx) -> PolicySet:
    return ctx.policies()

"""Participant endpoints: reports in (policy version, policies when moved out), token grants of shared limits.

``POST /v1/report`` is the one call every participant makes every interval -- with 1,000 Spark workers, 1,000 a
second on one core -- so a valid report skips FastAPI's per-request machinery (routing, dependency solving, a
``json.loads`` before validation: about half the control plane's CPU per report, benchmarks/bench_load.py):
``ParticipantFastPath`` parses it with pydantic straight from the bytes and answers it with ``answer_report``, the
same function the route calls; ``POST /v1/grant`` (a participant asking for chunks of the shared limits its
producers spend, several times a second while they send) takes the same path with ``answer_grant``. Anything it does not accept (another content type, an invalid
body) goes on to the route, so the route stays the one place that explains errors (422 with the reason) and
documents the endpoint.
"""

import re
import time
from typing import Annotated

from fastapi import APIRouter, Depends, Response
from pydantic import ValidationError
from starlette.background import BackgroundTask
from starlette.types import ASGIApp, Receive, Scope, Send

from controlplane.context import Context, get_ctx
from controlplane.errors import not_found, reason_json, unavailable
from controlplane.grant_tables import StateStoreUnavailable
from controlplane.loop_lag import LoopLag
from controlplane.middleware import deflated, replay_body
from controlplane.state import LiveState
from protocol import (
    Goodbye,
    GrantAnswer,
    GrantRequest,
    PolicySet,
    Report,
    ReportResponse,
    limit_key,
    report_timeout_s,
)

REPORT_PATH = "/v1/report"   # also what the report timer (api_metrics) times
GRANT_PATH = "/v1/grant"

router = APIRouter(prefix="/v1", tags=["participants"])
Ctx = Annotated[Context, Depends(get_ctx)]


@router.post("/report", response_model=ReportResponse, summary="Report usage and state; get policies and usage",
             description="Needs the participant (or admin) token. The answer carries the full policy document only "
                         "when applied_policy_version differs from the current version, and, for every shared limit "
                         "in the report's usage or usage_unchanged, every live participant's usage and demand (a "
                         "participant's unchanged entries keep the values it sent last; usage_map=false leaves "
                         "the map out), and the keys the control plane holds none of the participant's usage "
                         "for. A stale or out-of-sequence report is answered with accepted=false and stores "
                         "nothing.",
             responses={422: {"description": "Malformed report; nothing stored"}})
async def report(body: Report, ctx: Ctx) -> Response:
    # async: in-memory work (and one SQLite read), run on the event loop. In the thread pool, hundreds of reports
    # a second convoy on the GIL with the loop's own I/O and queue up for seconds (benchmarks/bench_load.py).
    # Serialised here: FastAPI would validate the model it was just built from again (response_model documents it).
    # The history's part of the report is done once the answer is sent (LiveState.settle).
    return Response(answer_report(ctx, body), media_type="application/json", background=BackgroundTask(_settle, ctx))


async def _settle(ctx: Context) -> None:   # (async: on the loop, not a worker thread)
    ctx.live.settle()


def answer_report(ctx: Context, body: Report) -> bytes:
    """Ingest one valid report and render the answer (JSON of a ``ReportResponse``); a replica passes it on."""
    interval_s = ctx.pace.interval_s(body.participant.participant_id, ctx.live.participants)
    answer = report_response(ctx.live, ctx.policies(), interval_s, body)
    if answer.accepted and ctx.reports is not None:
        ctx.reports.put(body)
    if answer.policies is None:
        return answer.model_dump_json().encode()
    # the policy document rendered once (Context.policies_json), set in where the answer has it as null: the second
    # field, after a number, so the first '"policies":null' is its own
    rest = answer.model_copy(update={"policies": None}).model_dump_json().encode()
    return rest.replace(_NO_POLICIES, b'"policies":' + ctx.policies_json(answer.policies), 1)


_NO_POLICIES = b'"policies":null'


def report_response(live: LiveState, policies: PolicySet, interval_s: float, body: Report) -> ReportResponse:
    """Ingest one valid report into ``live`` and answer it (the policies only when the participant's are not
    the current ones; the usage map only when asked for)."""
    live.tell(interval_s)
    accepted, reason = live.ingest(body)
    keys = [limit_key(u.level, u.direction, u.name) for u in body.usage] + list(body.usage_unchanged)
    return ReportResponse(
        policyVersion=policies.version,
        policies=policies if body.applied_policy_version != policies.version else None,
        usage=live.usage_map(keys) if body.usage_map else {},
        reportIntervalSeconds=interval_s,
        nextReportInSeconds=live.next_report_in_s(body.participant.participant_id, interval_s),
        accepted=accepted, reason=reason, usageMissing=live.missing(body.participant.participant_id, keys))


@router.post("/grant", response_model=GrantAnswer, summary="Ask for tokens of shared limits, or give them back",
             description="Needs the participant (or admin) token. One grant per ask, in order: the tokens granted "
                         "now (-1 = unlimited; never more than the limit in any window of its period, over every "
                         "participant), the fair chunk to ask for next, the fallback rate to use while the control "
                         "plane cannot be reached, and how soon more is free. Tokens given back (returns_*) are "
                         "credited to the participant's newest grants.",
             responses={422: {"description": "Malformed request; nothing changed"}})
async def grant(body: GrantRequest, ctx: Ctx) -> Response:
    return Response(answer_grant(ctx, body), media_type="application/json")


def answer_grant(ctx: Context, body: GrantRequest) -> bytes:
    started = time.thread_time()
    policies = ctx.policies()
    answer = GrantAnswer(policyVersion=policies.version, learning=ctx.grants.learning,
                         grants=ctx.grants.answer(body.participant_id, body.asks, policies, body.sent_s))
    payload = answer.model_dump_json().encode()
    ctx.pace.exclude(time.thread_time() - started)   # (paced by the grants' own rules: not the reports' CPU)
    return payload


# the loop this far behind -- the shortest time a sender waits -- or the core this full, a report's age may be its
# wait in a queue, not a skewed clock or a slow network (where a report is answered as before: not accepted, as
# stale). The core's share sees the queue the loop's lag does not: new connections wait to be accepted
# (controlplane.loop_lag), and a full core answering reports whose senders had gone answered no one in time
GIVEN_UP_LAG_S = 0.5
GIVEN_UP_BUSY_SHARE = 0.9
_SENT_AT = re.compile(rb'"sent_at":\s*([0-9][0-9.eE+]*)')
_INTERVAL = re.compile(rb'"interval_s":\s*([0-9][0-9.eE+]*)')
_HEAD_BYTES = 4096   # (a report's participant, seq, sent_at and interval_s come first, as its model orders them)


def behind(lag: LoopLag) -> bool:
    """Whether reports may be waiting in a queue: the loop late, or the core full."""
    return lag.last_s > GIVEN_UP_LAG_S or lag.busy_share >= GIVEN_UP_BUSY_SHARE


def given_up_s(body: bytes, now_s: float) -> tuple[float, float] | None:
    """(how long the report ``body`` waited, its sender's timeout) when the wait is past the timeout -- its sender
    has given the round up and backs off -- read from the body's head without parsing it; else None. Under a storm
    of reports (300 participants of 1,000 limits started together), the loop worked through reports whose senders
    had stopped waiting, their answers carrying the whole policy document, and no answer came in time for anyone."""
    head = body[:_HEAD_BYTES]
    sent, interval = _SENT_AT.search(head), _INTERVAL.search(head)
    if sent is None or interval is None:
        return None
    try:
        waited_s, timeout_s = now_s - float(sent.group(1)), report_timeout_s(float(interval.group(1)))
    except ValueError:
        return None
    return (waited_s, timeout_s) if waited_s > timeout_s else None


def _is_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name.lower() == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"application/json"
    return False


class ParticipantFastPath:
    """ASGI middleware: answer a valid ``POST /v1/report`` or ``/v1/grant`` here; pass everything else on.

    Sits inside the guard (authorisation, body size and nesting are checked before it) and the report timer, in
    front of FastAPI's own layers (``controlplane.app.ControlPlaneApp``): what it passes on goes through them."""

    def __init__(self, app: ASGIApp, ctx: Context) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = _FAST.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if handler is None or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        model, answer = handler
        if model is Report and behind(self.ctx.lag):
            given_up = given_up_s(body, time.time())
            if given_up is not None:
                self.ctx.given_up += 1
                await reason_json(503, f"the report waited {given_up[0]:.1f} s for the control plane, longer than its "
                                       f"sender waits ({given_up[1]:g} s): not worked on; report again after the "
                                       "backoff", {"Retry-After": "1"})(scope, receive, send)
                return
        try:
            parsed = model.model_validate_json(body)
        except ValidationError:
            await self.app(scope, replay_body(body, receive), send)   # the route says what is wrong
            return
        try:
            payload = answer(self.ctx, parsed)
        except StateStoreUnavailable as e:   # a replica without its Redis: 503, the participant retries
            await unavailable(e)(scope, receive, send)
            return
        payload, encoding = deflated(scope, payload)   # (in front of the routes' gzip middleware: controlplane.app)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode()), *encoding]})
        await send({"type": "http.response.body", "body": payload})
        self.ctx.live.settle()   # the history's part of a report, after its answer (LiveState.settle)


@router.post("/goodbye", status_code=204, summary="Leave at once (removes the participant and its usage)",
             responses={204: {"description": "Removed"}, 404: {"description": "Not a live participant"}})
async def goodbye(body: Goodbye, ctx: Ctx) -> Response:
    ctx.grants.goodbye(body.participant_id)   # (what it was granted stays in the windows until it slides out)
    if ctx.reports is not None:
        ctx.reports.bye(body.participant_id)
    if not ctx.live.goodbye(body.participant_id):
        raise not_found(f"participant {body.participant_id!r} is not live (never reported, or already removed)")
    return Response(status_code=204)


@router.get("/policies", response_model=PolicySet, summary="The current policy document",
            description="The same document /v1/report returns when the policy version moved.")
def policies(ctx: Ctx) -> PolicySet:
    return ctx.policies()


_FAST = {REPORT_PATH: (Report, answer_report), GRANT_PATH: (GrantRequest, answer_grant)}

"""Live state for the dashboard (read token unless reads are open) and the health check (always open)."""

import math
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from controlplane.config import package_version
from controlplane.context import Context, get_ctx
from controlplane.state import HISTORY_S, LEVEL_ORDER
from protocol import UsageValues, parse_limit_key

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
            summary="Per resource group: configured quota, attachments, per-participant usage, demand and allocation",
            description="A participant's allocation is its fair rate from the grant book (as in /v1/state/shared) "
                        "when it asked for grants of the group in the window; otherwise PIP-82's usage-based split "
                        "of what the grant holders leave.")
def resource_groups(ctx: Ctx) -> dict[str, Any]:
    return ctx.live.resource_groups(ctx.policies(), ctx.grants)


@router.get("/v1/state/history", summary="Per limiter, the last minutes at report resolution (in memory)")
def history(ctx: Ctx,
            level: Annotated[str | None, Query(pattern="^(" + "|".join(LEVEL_ORDER) + ")$")] = None,
            name: Annotated[str | None, Query(min_length=1, max_length=512)] = None,
            seconds: Annotated[float, Query(gt=0, le=HISTORY_S)] = HISTORY_S) -> dict[str, Any]:
    return ctx.live.history(level, name, seconds)


UNLIMITED = "unlimited"
PerSecond = float | Literal["unlimited"]


class SharedParticipant(BaseModel):
    participantId: str
    demandMsgsPerSecond: float = Field(description="What it wants, as it reported last (admitted + throttled)")
    usageMsgsPerSecond: float = Field(description="What it admitted over its last report interval")
    shareMsgsPerSecond: PerSecond | None = Field(
        description="Its max-min fair rate from the grant window (0: it did not ask in the window; null: nobody "
                    "asked for grants of this limit; 'unlimited' when the limit is not set)")
    grantedMsgsInWindow: PerSecond | None = Field(description="Tokens granted to it in the last window")
    demandBytesPerSecond: float
    usageBytesPerSecond: float
    shareBytesPerSecond: PerSecond | None
    grantedBytesInWindow: PerSecond | None


class SharedLimit(BaseModel):
    key: str = Field(description="limit_key(level, direction, name)")
    level: str
    direction: str
    name: str
    limitMsgsPerSecond: PerSecond = Field(description="The limit now, per second ('unlimited' when not limited)")
    limitBytesPerSecond: PerSecond
    windowSeconds: float | None = Field(description="The grant window (the limit's period); null: nobody asked")
    askers: int = Field(description="Participants that asked for grants in the window")
    usageMsgsPerSecond: float = Field(description="Admitted, summed over the participants")
    demandMsgsPerSecond: float
    usageBytesPerSecond: float
    demandBytesPerSecond: float
    grantedMsgsInWindow: PerSecond | None = Field(description="Tokens granted in the last window, to everyone")
    grantedBytesInWindow: PerSecond | None
    grantedMsgsToOthers: float = Field(
        0, description="Of those, granted to participants that report no usage of this limit")
    grantedBytesToOthers: float = 0
    utilisation: float | None = Field(description="Admitted msgs/s over the limit (1 = at the limit; null when "
                                                  "unlimited)")
    utilisationBytes: float | None
    participants: list[SharedParticipant]


class SharedState(BaseModel):
    policyVersion: int
    learning: bool = Field(description="The grant book re-learns after a restart (see POST /v1/grant)")
    limits: list[SharedLimit]


def _per_s(value: float | None, limit: float | None) -> float | str | None:
    """A grant-side value: 'unlimited' when the limit is not set, None when nobody asked (no window)."""
    return UNLIMITED if limit is None else value


def _shared_limit(key: str, users: dict[str, UsageValues], grants: dict[str, Any]) -> SharedLimit:
    level, direction, name = parse_limit_key(key)
    out: dict[str, Any] = {"key": key, "level": level, "direction": direction, "name": name,
                           "windowSeconds": grants["windowSeconds"], "askers": grants["askers"]}
    people: dict[str, dict[str, Any]] = {pid: {"participantId": pid} for pid in sorted(users)}
    for dim, word in (("msgs", "Msgs"), ("bytes", "Bytes")):
        limit, granted = grants[dim]["limitPerSecond"], grants[dim]["granted"]
        usage = math.fsum(getattr(u, f"usage_{dim}_per_s") for u in users.values())
        mine = 0.0
        for pid, u in users.items():
            held = grants["holders"].get(pid, {}).get(dim) or {}
            mine += held.get("granted") or 0.0
            people[pid].update({f"demand{word}PerSecond": getattr(u, f"demand_{dim}_per_s"),
                                f"usage{word}PerSecond": getattr(u, f"usage_{dim}_per_s"),
                                f"share{word}PerSecond": _per_s(held.get("fairPerSecond"), limit),
                                f"granted{word}InWindow": _per_s(held.get("granted"), limit)})
        out.update({f"limit{word}PerSecond": UNLIMITED if limit is None else limit,
                    f"usage{word}PerSecond": usage,
                    f"demand{word}PerSecond": math.fsum(getattr(u, f"demand_{dim}_per_s") for u in users.values()),
                    f"granted{word}InWindow": _per_s(granted, limit),
                    f"granted{word}ToOthers": max(0.0, (granted or 0.0) - mine),
                    "utilisation" if dim == "msgs" else "utilisationBytes": None if limit is None else usage / limit})
    return SharedLimit(**out, participants=[SharedParticipant(**p) for p in people.values()])


@router.get("/v1/state/shared", response_model=SharedState,
            summary="Per shared limit: each participant's demand, usage and share, and the limit's utilisation",
            description="Joins every live participant's latest usage and demand per shared limit (POST /v1/report) "
                        "with the grants of POST /v1/grant: per participant its max-min fair rate and the tokens "
                        "granted to it in the last window; per limit the limit now ('unlimited' when not limited), "
                        "what was admitted and granted in all, and the utilisation (admitted / limit).")
def shared(ctx: Ctx) -> SharedState:
    policies = ctx.policies()
    usage = ctx.live.shared_usage()
    book = ctx.grants.shares({k: list(users) for k, users in usage.items()}, policies)
    return SharedState(policyVersion=policies.version, learning=ctx.grants.learning,
                       limits=[_shared_limit(key, usage.get(key, {}), book[key]) for key in sorted(book, key=_order)])


def _order(key: str) -> tuple[int, str, str]:
    level, direction, name = parse_limit_key(key)
    return (LEVEL_ORDER.index(level) if level in LEVEL_ORDER else len(LEVEL_ORDER)), direction, name

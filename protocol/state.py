"""What the control plane's ``/v1/state/*`` endpoints answer: typed, so the dashboard reads attributes, not keys.

The control plane builds these (``controlplane.views``) and declares them as the endpoints' response models (the
OpenAPI document shows them); the dashboard's data module (``dashboard.data``) parses every answer into them, so a
field renamed on one side fails the dashboard's tests instead of showing an empty table. Lenient, like every
answer (``protocol.fields``): a newer control plane's extra fields are ignored. Field names are the JSON's own
(camelCase, as the rest of the state API), and per-second values say so in their names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr

from .fields import LenientModel
from .wire import DimensionSnapshot, MutationQuotaSnapshot, OffloadStats, QueueEntry

__all__ = [
    "UNLIMITED", "PerSecond", "StateAnswer", "ParticipantView", "DepartedView", "ParticipantsState", "BucketRow",
    "DimensionTotal", "BucketTotal", "BucketsState", "QueueRow", "QueuesState", "GroupUser", "GroupDirection",
    "ResourceGroupView", "ResourceGroupsState", "HistoryPoint", "HistorySeries", "HistoryState", "SharedParticipant",
    "AdaptiveState", "SharedLimit", "SharedState", "AdaptivePoint", "AdaptiveTrace", "AdaptiveTraceState",
]

UNLIMITED = "unlimited"
PerSecond = float | Literal["unlimited"]


class StateAnswer(LenientModel):
    """An endpoint's whole answer. ``age_s``: how old the control plane's render of it was when it was read (its
    ``Age`` header: a view this large is rendered anew at most so often, ``controlplane.renders``), set by the
    reader; None when it was rendered for the read. Not a field: it is how it came, not what it says (no JSON or
    schema has it; pydantic's ``==`` compares it, as it does every private attribute)."""

    _age_s: float | None = PrivateAttr(default=None)

    @property
    def age_s(self) -> float | None:
        return self._age_s

    def set_age_s(self, age_s: float | None) -> None:
        self._age_s = age_s


# ---------------------------------------------------------------- /v1/state/participants

class ParticipantView(LenientModel):
    participantId: str
    applicationId: str
    executorId: str
    host: str
    pid: int
    alive: bool = True
    firstSeen: float = Field(description="Unix seconds, the control plane's clock")
    lastSeen: float
    secondsSinceLastSeen: float
    appliedPolicyVersion: int
    upToDate: bool | None = Field(description="Applies the current policy version (null for departed ones)")
    seq: int
    reports: int = Field(description="Reports accepted from it")
    intervalSeconds: float
    dispatchThrottled: dict[str, int] = Field(default_factory=dict)
    offload: OffloadStats | None = None
    mutationQuotas: list[MutationQuotaSnapshot] = Field(default_factory=list)


class DepartedView(ParticipantView):
    departedBecause: Literal["goodbye", "expired"]
    departedAt: float


class ParticipantsState(StateAnswer):
    policyVersion: int
    reportIntervalSeconds: float
    participants: list[ParticipantView]
    departed: list[DepartedView] = Field(description="Recently departed, newest first")


# ---------------------------------------------------------------- /v1/state/buckets and /v1/state/queues

class BucketRow(LenientModel):
    participantId: str
    level: str
    name: str
    kind: str
    msgs: DimensionSnapshot | None = None
    bytes: DimensionSnapshot | None = None
    reportedAt: float


class DimensionTotal(LenientModel):
    tokens: float = 0.0
    rate: float = 0.0
    capacity: float = 0.0
    ratePerSecond: float | None = Field(None, description="Summed over the participants whose bucket is limited "
                                        "(rate > 0): rate / period_s; null when none is")


class BucketTotal(LenientModel):
    level: str
    name: str
    kind: str
    participants: int
    msgs: DimensionTotal = Field(default_factory=DimensionTotal)
    bytes: DimensionTotal = Field(default_factory=DimensionTotal)


class BucketsState(StateAnswer):
    buckets: list[BucketRow] = Field(description="Per participant and limiter (none when asked for the totals only)")
    totals: list[BucketTotal] = Field(description="Summed over the participants, per (level, kind, name)")


class QueueRow(LenientModel):
    participantId: str
    level: str
    name: str
    length: int
    entries: list[QueueEntry] = Field(description="Head first (the next to resume)")


class QueuesState(StateAnswer):
    queues: list[QueueRow]


# ---------------------------------------------------------------- /v1/state/resourcegroups

class GroupUser(LenientModel):
    usage_msgs_per_s: float = Field(0.0, description="Admitted per second over its last 5-11 s, from its counters")
    usage_bytes_per_s: float = 0.0
    demand_msgs_per_s: float = 0.0
    demand_bytes_per_s: float = 0.0
    allocation_msgs_per_s: float = Field(-1, description="Its allocation (-1: unlimited)")
    allocation_bytes_per_s: float = -1


class GroupDirection(LenientModel):
    quotaMsgsPerSecond: float
    quotaBytesPerSecond: float
    participants: dict[str, GroupUser] = Field(default_factory=dict)


class ResourceGroupView(LenientModel):
    name: str
    configured: dict[str, object] = Field(description="The group as configured (its Pulsar fields)")
    strategy: str
    topics: list[str] = Field(default_factory=list)
    namespaces: list[str] = Field(default_factory=list)
    tenants: list[str] = Field(default_factory=list)
    publish: GroupDirection
    dispatch: GroupDirection


class ResourceGroupsState(StateAnswer):
    policyVersion: int
    strategy: str
    resourceGroups: list[ResourceGroupView]


# ---------------------------------------------------------------- /v1/state/history

class HistoryPoint(LenientModel):
    t: float = Field(description="Start of the report interval, control plane's seconds")
    admittedMsgsPerSecond: float | None = None
    admittedBytesPerSecond: float | None = None
    throttleSecondsPerSecond: float | None = None
    throttledPerSecond: float | None = None
    tokensMsgs: float | None = None
    tokensBytes: float | None = None
    participants: int = 0


class HistorySeries(LenientModel):
    level: str
    kind: str
    name: str
    points: list[HistoryPoint]


class HistoryState(StateAnswer):
    intervalSeconds: float
    windowSeconds: float
    series: list[HistorySeries]


# ---------------------------------------------------------------- /v1/state/shared

class SharedParticipant(LenientModel):
    participantId: str
    demandMsgsPerSecond: float = Field(description="What it wants (admitted + throttled): its usage below times "
                                       "the demand / usage it reported last")
    usageMsgsPerSecond: float = Field(description="What it admitted per second over its last 5-11 s, from its "
                                      "counters (its first seconds: over its last report interval)")
    shareMsgsPerSecond: PerSecond | None = Field(
        description="Its max-min fair rate from the grant window (0: it did not ask in the window; null: nobody "
                    "asked for grants of this limit; 'unlimited' when the limit is not set)")
    grantedMsgsInWindow: PerSecond | None = Field(description="Tokens granted to it in the last window")
    demandBytesPerSecond: float
    usageBytesPerSecond: float
    shareBytesPerSecond: PerSecond | None
    grantedBytesInWindow: PerSecond | None


class AdaptiveState(LenientModel):
    """An adaptive limit (``limiter.adaptive``): the rate it learnt under the configured ceiling."""

    ratePerSecond: float = Field(description="Messages per second the sink is taken to take now")
    ceilingPerSecond: float = Field(description="The configured limit: the highest the rate goes")
    floorPerSecond: float = Field(description="The lowest the rate goes")
    pausedForSeconds: float = Field(description="What is left of a pause the sink asked for (Retry-After)")
    changedBy: str = Field(description="What moved it last: operator, decrease, increase or retry-after")
    ok: int = Field(description="Sends the sink took (since the control plane started)")
    throttled: int = Field(description="Sends the sink refused as too many")
    errors: int = Field(description="Sends that failed otherwise")


class SharedLimit(LenientModel):
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
    participants: list[SharedParticipant] = Field(
        description="Each participant that uses it, by id (none when asked for the summary only)")
    participantCount: int | None = Field(None, description="How many participants use it, listed or not")
    adaptive: AdaptiveState | None = Field(None, description="The adaptive rate of an adaptive limit (its "
                                                             "limitMsgsPerSecond is that rate); null: not adaptive")


class AdaptivePoint(LenientModel):
    t: float = Field(description="Unix time")
    ratePerSecond: float = Field(description="The rate learnt (0 while the sink asked for a pause)")
    ceilingPerSecond: float = Field(description="The configured limit then")
    okPerSecond: float = Field(description="Sends the sink took, per second since the point before")
    throttledPerSecond: float = Field(description="Sends the sink refused as too many, per second since then")


class AdaptiveTrace(LenientModel):
    key: str = Field(description="limit_key(level, direction, name)")
    points: list[AdaptivePoint]


class AdaptiveTraceState(StateAnswer):
    limits: list[AdaptiveTrace]


class SharedState(StateAnswer):
    policyVersion: int
    learning: bool = Field(description="The grant book re-learns after a restart (see POST /v1/grant)")
    limits: list[SharedLimit]

"""The wire schema between participants and the control plane (one report in, one answer out).

How it works
------------
Every report interval each participant (a Spark Python worker or the driver) POSTs one ``Report`` to the control
plane's ``/v1/report``. The report carries what the control plane relays (PIP-82: usage and demand per *shared
limit*, i.e. per (level, name, direction)) and what the dashboard shows (bucket snapshots, fairness queues,
counters, offload stats, mutation quotas). The answer, a ``ReportResponse``, carries the current policy version,
the full ``PolicySet`` only when the version the participant applied is not the current one, and the usage map of
every shared limit the participant reported: ``usage[limit_key][participant_id]``. The participant computes its
local share of each shared quota from that map, as PIP-82 brokers do from the usage topic.

Two directions, two strictness rules:

- what participants send (``Report``, ``Goodbye``) is *strict*: unknown fields are rejected (422, naming the
  allowed ones), lists and strings are bounded, numbers are finite. A rejected report changes nothing.
- what the control plane answers (``ReportResponse``, ``PolicySet`` and the Pulsar-shaped policy objects in it)
  is *lenient* (unknown fields ignored), so an older participant keeps working against a newer control plane.
  The control plane's admin API validates the same policy objects strictly (it subclasses them).

Policy versions start at 1; a participant that applied nothing yet reports ``applied_policy_version = 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    WithJsonSchema,
    model_validator,
)

from limiter.levels import split_topic
from limiter.policy import Level, PolicyError, Rate, check_limit

__all__ = [
    "MAX_NAME", "Direction", "Kind", "StrictModel", "LenientModel", "limit_key", "parse_limit_key",
    "Participant", "SharedUsage", "DimensionSnapshot", "BucketSnapshot", "QueueEntry", "QueueSnapshot",
    "LimiterCounters", "OffloadStats", "MutationQuotaSnapshot", "Report", "Goodbye",
    "PublishRate", "DispatchRate", "ResourceGroup", "MutationQuota", "MutationQuotaEntry", "LevelPolicies",
    "TenantPolicies", "SubscriptionPolicies", "PolicySet", "UsageValues", "ReportResponse", "to_rate", "LimitKey",
    "QuotaStrategyName", "QUOTA_STRATEGIES", "GrantAsk", "GrantRequest", "Grant", "GrantAnswer",
]

MAX_NAME = 512          # limiter names, participant ids, producer names
MAX_LIST = 4096         # usage entries, buckets, counters per report
MAX_QUEUES = 1024
MAX_NUMBER = 1e300       # numbers of larger magnitude are refused; the JSON schemas say so (the contract)
MAX_COUNT = 2**53 - 1    # counters, sequence numbers, pids: exact as floats (Prometheus, JSON readers), fit SQLite
MAX_QUEUE_ENTRIES = 256  # a queue snapshot carries its head; ``length`` says how long the queue really is

Direction = Literal["publish", "dispatch"]
Kind = Literal["publish", "dispatch", "offload"]
LevelName = Literal["broker", "resource_group", "tenant", "namespace", "topic", "subscription"]
assert set(LevelName.__args__) == {lv.value for lv in Level}  # type: ignore[attr-defined]


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(check: Callable[[float], str | None], schema: dict[str, Any]) -> Any:
    """A JSON number (not a string, not a boolean), finite, passing ``check``; ints stay ints."""
    def validate(v: Any) -> int | float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"must be a number, got {type(v).__name__} {_show(v)}")
        try:
            finite = math.isfinite(v) and abs(v) <= MAX_NUMBER
        except OverflowError:
            finite = False
        if not finite:
            raise ValueError(f"must be a finite number, got {_show(v)}")
        problem = check(v)
        if problem:
            raise ValueError(problem)
        return v
    return Annotated[int | float, PlainValidator(validate), WithJsonSchema(schema)]


def _whole(low: int, high: int) -> Any:
    """A JSON integer ``low..high``. As in JSON Schema, a number without a fractional part (``2.0``) is one;
    strings and booleans are not."""
    def validate(v: Any) -> int:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"must be a whole number, got {type(v).__name__} {_show(v)}")
        if not low <= v <= high:
            raise ValueError(f"must be a whole number {low}..{high}, got {_show(v)}")
        return v
    return Annotated[int, PlainValidator(validate), WithJsonSchema({"type": "integer", "minimum": low,
                                                                    "maximum": high})]


def _limit(v: float) -> str | None:
    try:
        check_limit("the limit", v)
    except PolicyError as e:
        return str(e).removeprefix("the limit ")
    return None


Number = _number(lambda v: None, {"type": "number", "minimum": -MAX_NUMBER, "maximum": MAX_NUMBER})
NonNeg = _number(lambda v: None if v >= 0 else f"must be >= 0, got {v!r}",
                 {"type": "number", "minimum": 0, "maximum": MAX_NUMBER})
Positive = _number(lambda v: None if v > 0 else f"must be > 0, got {v!r}",
                   {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_NUMBER})
Limit = _number(_limit, {"anyOf": [{"type": "number", "minimum": 0, "maximum": MAX_NUMBER}, {"const": -1}],
                         "description": "a number >= 0, or -1 for unlimited"})
Window = _number(lambda v: None if 0 < v <= 3600 else f"must be > 0 and <= 3600 seconds, got {v!r}",
                 {"type": "number", "exclusiveMinimum": 0, "maximum": 3600})
Count = _whole(0, MAX_COUNT)
Label = Annotated[str, Field(min_length=1, max_length=MAX_NAME, pattern=r"^[^\x00-\x1f\x7f]+$")]
LimitKey = Annotated[str, Field(
    min_length=1, max_length=MAX_NAME + 40,
    pattern=r"^(broker|resource_group|tenant|namespace|topic|subscription):(publish|dispatch):[^\x00-\x1f\x7f]+$",
    description="limit_key(level, direction, name)")]
QuotaStrategyName = Literal["fair", "proportional"]
QUOTA_STRATEGIES: tuple[str, ...] = QuotaStrategyName.__args__  # type: ignore[attr-defined]


def limit_key(level: str, direction: str, name: str) -> str:
    """The string key of a shared limit in the usage map: ``"<level>:<direction>:<name>"`` (name may hold ':')."""
    return f"{level}:{direction}:{name}"


def parse_limit_key(key: str) -> tuple[str, str, str]:
    level, direction, name = key.split(":", 2)
    return level, direction, name


_ALLOWED: dict[type, dict[str, None]] = {}   # StrictModel subclass -> its field names, in order


class StrictModel(BaseModel):
    """Unknown fields are an error that names the allowed ones."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = _ALLOWED.get(cls)
            if allowed is None:  # once per class: this runs for every object of every report
                allowed = _ALLOWED[cls] = {f.alias or n: None for n, f in cls.model_fields.items()}
            if not data.keys() <= allowed.keys():
                unknown = sorted(str(k) for k in data if k not in allowed)
                raise ValueError(f"unknown field(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}")
        return data


class LenientModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- participant -> control plane


class Participant(StrictModel):
    participant_id: Label = Field(description="Unique id of this participant, e.g. '<app>/<executor>/<host>/<pid>'")
    application_id: Label = Field(description="Spark application id")
    executor_id: Label = Field(description="Spark executor id ('driver' for the driver)")
    host: Label = Field(description="Host name of the process")
    pid: Count = Field(description="OS process id")


class SharedUsage(StrictModel):
    level: LevelName = Field(description="Level of the shared limit (resource_group, tenant, namespace, topic, ...)")
    name: Label = Field(description="Name at that level, as in the policies: resource group name, 'tenant', "
                                    "'tenant/ns', 'tenant/ns/topic', 'tenant/ns/topic/subscription'")
    direction: Direction = Field(description="publish (egress) or dispatch (ingest/read)")
    usage_msgs_per_s: NonNeg = Field(0, description="Messages per second admitted over the last interval")
    usage_bytes_per_s: NonNeg = Field(0, description="Bytes per second admitted over the last interval")
    demand_msgs_per_s: NonNeg = Field(0, description="Messages per second wanted (admitted + throttled)")
    demand_bytes_per_s: NonNeg = Field(0, description="Bytes per second wanted (admitted + throttled)")


class DimensionSnapshot(StrictModel):
    tokens: Number = Field(description="Current balance (may be negative)")
    rate: Number = Field(description="Tokens added per period (<= 0: unlimited)")
    capacity: Number = Field(description="Maximum balance")
    period_s: Positive = Field(1.0, description="Rate period in seconds")


class BucketSnapshot(StrictModel):
    level: LevelName
    name: Label
    kind: Kind = Field(description="publish, dispatch or offload")
    msgs: DimensionSnapshot | None = Field(None, description="Messages bucket (absent when unlimited)")
    bytes: DimensionSnapshot | None = Field(None, description="Bytes bucket (absent when unlimited)")


class QueueEntry(StrictModel):
    producer: Label = Field(description="Producer name")
    waiting_s: NonNeg = Field(description="Seconds this producer has been waiting")


class QueueSnapshot(StrictModel):
    level: LevelName
    name: Label
    length: Count = Field(0, description="Full queue length (entries may hold only its head)")
    entries: list[QueueEntry] = Field(default_factory=list, max_length=MAX_QUEUE_ENTRIES,
                                      description="Waiting producers, head (next to resume) first")


class LimiterCounters(StrictModel):
    level: LevelName
    name: Label
    kind: Kind
    throttled_count: Count = Field(0, description="Times a producer was throttled (counter)")
    throttle_time_seconds_total: NonNeg = Field(0, description="Producer-seconds spent throttled (counter)")
    admitted_msgs_total: NonNeg = Field(0, description="Messages admitted (counter)")
    admitted_bytes_total: NonNeg = Field(0, description="Bytes admitted (counter)")


class OffloadStats(StrictModel):
    limit_bytes_per_s: Limit = Field(-1, description="Configured flow permits (bytes/s, -1 = off)")
    limited_total: Count = Field(0, description="Reads delayed by the limit (brk_ledgeroffloader_ledger_offload_limited)")
    read_bytes_total: NonNeg = Field(0, description="Bytes read for offload")
    offload_time_seconds_total: NonNeg = Field(0, description="Seconds spent offloading")
    reading_max_bytes: NonNeg = Field(0, description="Largest single read estimate in bytes")
    errors_total: Count = Field(0, description="Offload errors")
    rate_bytes_per_s: NonNeg = Field(0, description="Bytes read per second over the last complete window "
                                                    "(brk_ledgeroffloader_offload_rate)")


class MutationQuotaSnapshot(StrictModel):
    user: Label
    client_id: Label
    tokens: Number = Field(description="KIP-599 bucket balance (may be negative)")
    rate: NonNeg = Field(0, description="Observed mutation rate per second")
    throttle_time_s: NonNeg = Field(0, description="Throttle time as the quota reports it (strict: the last "
                                                   "rejection's, counting down; permissive: -tokens / quota)")


# ---------------------------------------------------------------- token grants (limiter.grants)
#
# Between reports a participant asks ``POST /v1/grant`` for chunks of the shared limits its producers wait on or
# are about to run out of, and gives back what it did not spend when a limiter goes idle. One ``Grant`` answers
# each ``GrantAsk``. Amounts are tokens (messages, bytes), rates are per second; -1 = unlimited (the limit is
# not set); 0 = nothing is free right now (ask again after ``retry_s``).


class GrantAsk(StrictModel):
    level: LevelName = Field(description="Level of the shared limit")
    name: Label = Field(description="Name at that level, as in the policies")
    direction: Direction = Field(description="publish or dispatch")
    wants_msgs: NonNeg = Field(0, description="Message tokens wanted now")
    wants_bytes: NonNeg = Field(0, description="Byte tokens wanted now")
    rate_msgs_per_s: NonNeg = Field(0, description="Messages per second it wants to spend (its fair share is by these)")
    rate_bytes_per_s: NonNeg = Field(0, description="Bytes per second it wants to spend")
    returns_msgs: NonNeg = Field(0, description="Unspent message tokens given back")
    returns_bytes: NonNeg = Field(0, description="Unspent byte tokens given back")
    safe_msgs_per_s: NonNeg = Field(0, description="The fallback rate last answered (read after a restart)")
    safe_bytes_per_s: NonNeg = Field(0, description="The fallback rate last answered (read after a restart)")

    @property
    def key(self) -> str:
        return limit_key(self.level, self.direction, self.name)


class GrantRequest(StrictModel):
    """``POST /v1/grant``: asks for tokens of shared limits, and tokens given back."""

    participant_id: Label = Field(description="The asking participant (as in its reports)")
    asks: list[GrantAsk] = Field(default_factory=list, max_length=MAX_LIST)

    @model_validator(mode="after")
    def _unique(self) -> GrantRequest:
        seen: set[str] = set()
        for a in self.asks:
            if a.key in seen:
                raise ValueError(f"duplicate ask {a.key!r}: each limit may be asked for once per request")
            seen.add(a.key)
        return self


class Grant(LenientModel):
    level: str
    name: str
    direction: str
    msgs: float = Field(-1, description="Message tokens granted (-1 = unlimited)")
    bytes: float = Field(-1, description="Byte tokens granted (-1 = unlimited)")
    chunk_msgs: float = Field(-1, description="The fair chunk now: what to ask for next time")
    chunk_bytes: float = Field(-1, description="The fair chunk now: what to ask for next time")
    safe_msgs_per_s: float = Field(-1, description="Fallback rate while the control plane cannot be reached")
    safe_bytes_per_s: float = Field(-1, description="Fallback rate while the control plane cannot be reached")
    fair_msgs_per_s: float = Field(-1, description="This participant's fair share of the limit now (msgs per second)")
    fair_bytes_per_s: float = Field(-1, description="This participant's fair share of the limit now (bytes per second)")
    retry_s: float = Field(0, description="Seconds until more is free, when less than wanted was granted")
    holders: int = Field(0, description="How many participants asked for this limit in its last five windows and did not leave")

    @property
    def key(self) -> str:
        return limit_key(self.level, self.direction, self.name)


class GrantAnswer(LenientModel):
    policyVersion: int = Field(description="Current policy version")
    grants: list[Grant] = Field(default_factory=list)
    learning: bool = Field(False, description="True while a restarted control plane re-learns what is spent")


class Report(StrictModel):
    """One participant report, sent every interval (it is also the heartbeat). Each report is complete: it replaces
    the previous one, so a shared limit missing from both ``usage`` and ``usage_unchanged`` is no longer used by
    this participant (``usage_unchanged`` is PIP-82's report suppression: the heartbeat is never suppressed, only
    the usage values that did not move).
    ``participant_id`` must be unique per process lifetime (``seq`` restarts with the process). Lists are bounded;
    duplicate keys are rejected."""

    participant: Participant
    seq: Count = Field(description="Sequence number, increasing per participant; older or repeated ones are ignored")
    sent_at: Positive = Field(description="Send time, Unix seconds")
    interval_s: Positive = Field(description="The participant's report interval in seconds")
    applied_policy_version: Count = Field(0, description="Policy version the participant enforces (0 = none yet)")
    usage: list[SharedUsage] = Field(default_factory=list, max_length=MAX_LIST)
    buckets: list[BucketSnapshot] = Field(default_factory=list, max_length=MAX_LIST)
    queues: list[QueueSnapshot] = Field(default_factory=list, max_length=MAX_QUEUES)
    counters: list[LimiterCounters] = Field(default_factory=list, max_length=MAX_LIST)
    dispatch_throttled: dict[LevelName, Count] = Field(
        default_factory=dict, description="Dispatch throttle events (counter) by the level that throttled")
    offload: OffloadStats | None = None
    mutation_quotas: list[MutationQuotaSnapshot] = Field(default_factory=list, max_length=MAX_LIST)
    usage_unchanged: list[LimitKey] = Field(
        default_factory=list, max_length=MAX_LIST,
        description="PIP-82 report suppression: limit keys ('<level>:<direction>:<name>') this participant still "
                    "uses but whose usage and demand moved less than its tolerance since it last sent them; the "
                    "control plane keeps the values it holds for them. A key the control plane holds nothing for "
                    "(e.g. after its restart) is simply absent from the answer's usage map, and the participant "
                    "then sends it in full")

    @model_validator(mode="after")
    def _unique(self) -> Report:
        def check(what: str, keys: list[tuple[str, ...]]) -> None:
            seen: set[tuple[str, ...]] = set()
            for k in keys:
                if k in seen:
                    raise ValueError(f"duplicate {what} entry {'/'.join(k)!r}: each may appear once per report")
                seen.add(k)
        check("usage", [(u.level, u.direction, u.name) for u in self.usage])
        check("buckets", [(b.level, b.kind, b.name) for b in self.buckets])
        check("queues", [(q.level, q.name) for q in self.queues])
        check("counters", [(c.level, c.kind, c.name) for c in self.counters])
        check("mutation_quotas", [(m.user, m.client_id) for m in self.mutation_quotas])
        check("usage_unchanged", [(k,) for k in self.usage_unchanged])
        sent = {limit_key(u.level, u.direction, u.name) for u in self.usage}
        both = sorted(sent.intersection(self.usage_unchanged))
        if both:
            raise ValueError(f"limit key(s) {', '.join(map(repr, both))} appear both in usage and in "
                             "usage_unchanged: send each either in full or as unchanged")
        return self


class Goodbye(StrictModel):
    participant_id: Label


# ---------------------------------------------------------------- policies (Pulsar-shaped)

Period = _whole(1, 86400)
Samples = _whole(1, 1000)


class PublishRate(LenientModel):
    """Pulsar's PublishRate: messages and bytes per ratePeriodInSecond (-1 = unlimited)."""

    publishThrottlingRateInMsg: Limit = Field(-1, description="Messages per period; -1 (or 0) = unlimited")
    publishThrottlingRateInByte: Limit = Field(-1, description="Bytes per period; -1 (or 0) = unlimited")
    ratePeriodInSecond: Period = Field(1, description="Period in seconds (1..86400)")


class DispatchRate(LenientModel):
    """Pulsar's DispatchRate: messages and bytes per ratePeriodInSecond (-1 = unlimited)."""

    dispatchThrottlingRateInMsg: Limit = Field(-1, description="Messages per period; -1 (or 0) = unlimited")
    dispatchThrottlingRateInByte: Limit = Field(-1, description="Bytes per period; -1 (or 0) = unlimited")
    ratePeriodInSecond: Period = Field(1, description="Period in seconds (1..86400)")
    relativeToPublishRate: StrictBool = Field(False, description="Pulsar's rate relative to the topic's publish "
                                                                 "rate: not supported, the admin API refuses true")


class ResourceGroup(LenientModel):
    """PIP-82 resource group: a quota shared by everything attached to it (per second; -1 = unlimited)."""

    publishRateInMsgs: Limit = Field(-1, description="Messages per second published; -1 = unlimited")
    publishRateInBytes: Limit = Field(-1, description="Bytes per second published; -1 = unlimited")
    dispatchRateInMsgs: Limit = Field(-1, description="Messages per second dispatched; -1 = unlimited")
    dispatchRateInBytes: Limit = Field(-1, description="Bytes per second dispatched; -1 = unlimited")
    quotaStrategy: str | None = Field(
        None, description="How participants split this group's quotas: 'fair' (max-min fair share by reported "
                          "demand) or 'proportional' (Pulsar's: by current usage); null = the broker setting "
                          "defaultQuotaStrategy")


class MutationQuota(LenientModel):
    """KIP-599 controller mutation quota: burst = quotaPerSecond * samples * windowSeconds."""

    quotaPerSecond: Limit = Field(description="Mutations per second; -1 = unlimited")
    windowSeconds: Window = Field(1, description="Sample window in seconds (0 < w <= 3600)")
    samples: Samples = Field(11, description="Number of samples (1..1000)")
    strict: StrictBool = Field(True, description="true: reject when the bucket is negative; false: only throttle")


class MutationQuotaEntry(MutationQuota):
    user: str = Field(description="User, or '<default>'")
    clientId: str = Field(description="Client id, or '<default>'")


class LevelPolicies(LenientModel):
    publishRate: PublishRate | None = None
    dispatchRate: DispatchRate | None = None
    subscriptionDispatchRate: DispatchRate | None = None


class TenantPolicies(LenientModel):
    """Throttlescope extension: aggregate limits over everything of a tenant."""

    publishRate: PublishRate | None = None
    dispatchRate: DispatchRate | None = None


class SubscriptionPolicies(LenientModel):
    """A subscription's own policies (Pulsar's subscription-level dispatch rate, over the topic's and namespace's
    ``subscriptionDispatchRate``)."""

    dispatchRate: DispatchRate | None = None


class PolicySet(LenientModel):
    """Every policy at once, as one document a participant applies."""

    version: int = Field(description="Policy version of this document")
    resourceGroups: dict[str, ResourceGroup] = Field(default_factory=dict)
    tenantResourceGroups: dict[str, str] = Field(default_factory=dict, description="tenant -> resource group")
    namespaceResourceGroups: dict[str, str] = Field(default_factory=dict, description="'tenant/ns' -> resource group")
    topicResourceGroups: dict[str, str] = Field(
        default_factory=dict, description="'tenant/ns/topic' -> resource group (over its namespace's and tenant's)")
    tenants: dict[str, TenantPolicies] = Field(default_factory=dict, description="tenant -> aggregate limits")
    namespaces: dict[str, LevelPolicies] = Field(
        default_factory=dict, description="'tenant/ns' -> policies (defaults for each topic of the namespace)")
    topics: dict[str, LevelPolicies] = Field(default_factory=dict, description="'tenant/ns/topic' -> topic policies")
    subscriptions: dict[str, SubscriptionPolicies] = Field(
        default_factory=dict, description="'tenant/ns/topic/subscription' -> the subscription's own policies")
    brokerSettings: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="Every broker dynamic setting (defaults included)")
    mutationQuotas: list[MutationQuotaEntry] = Field(default_factory=list)

    def resource_group_of(self, topic: str) -> tuple[str, str] | None:
        """The resource group that applies to ``topic`` ('tenant/ns/topic') and what attaches it ('topic t/ns/x',
        'namespace t/ns' or 'tenant t'): the topic's, else its namespace's, else its tenant's; None: none."""
        tenant, namespace, topic = split_topic(topic)
        for scope, attached, target in (("topic", self.topicResourceGroups, topic),
                                        ("namespace", self.namespaceResourceGroups, namespace),
                                        ("tenant", self.tenantResourceGroups, tenant)):
            group = attached.get(target)
            if group is not None:
                return group, f"{scope} {target}"
        return None

    def rate_candidates(self, policy: str, topic: str, subscription: str | None = None
                        ) -> list[tuple[Level, PublishRate | DispatchRate | None]]:
        """The policies that may set a per-topic (``publishRate``, ``dispatchRate``) or per-subscription
        (``subscriptionDispatchRate``) limit of ``topic``, most specific first, None where unset: the
        subscription's own ``dispatchRate`` (for ``subscriptionDispatchRate`` with a ``subscription``), the
        topic's policy, the namespace's. Pulsar's precedence; the broker default comes after them."""
        _, namespace, topic = split_topic(topic)
        tp, np_ = self.topics.get(topic), self.namespaces.get(namespace)
        out: list[tuple[Level, PublishRate | DispatchRate | None]] = []
        if policy == "subscriptionDispatchRate" and subscription is not None:
            sp = self.subscriptions.get(f"{topic}/{subscription}")
            out.append((Level.SUBSCRIPTION, sp.dispatchRate if sp is not None else None))
        return out + [(Level.TOPIC, getattr(tp, policy, None) if tp is not None else None),
                      (Level.NAMESPACE, getattr(np_, policy, None) if np_ is not None else None)]

    def quota_strategy(self, group: str | None = None) -> str:
        """How a shared quota is split: resource group ``group``'s own ``quotaStrategy`` if set, else the broker
        setting ``defaultQuotaStrategy``, else 'fair'. An unknown word (a newer control plane) reads as 'fair'."""
        rg = self.resourceGroups.get(group) if group is not None else None
        for choice in (rg.quotaStrategy if rg is not None else None, self.brokerSettings.get("defaultQuotaStrategy")):
            if choice is not None:
                return choice if choice in QUOTA_STRATEGIES else "fair"
        return "fair"


# ---------------------------------------------------------------- control plane -> participant


class UsageValues(LenientModel):
    usage_msgs_per_s: float = 0
    usage_bytes_per_s: float = 0
    demand_msgs_per_s: float = 0
    demand_bytes_per_s: float = 0


class ReportResponse(LenientModel):
    policyVersion: int = Field(description="Current policy version")
    policies: PolicySet | None = Field(None, description="Present only when applied_policy_version differs")
    usage: dict[str, dict[str, UsageValues]] = Field(
        default_factory=dict,
        description="limit_key(level, direction, name) -> participant_id -> usage, for each shared limit reported")
    reportIntervalSeconds: float = Field(description="The interval participants should report at")
    accepted: bool = Field(True, description="False when the report was ignored (stale or out of sequence)")
    reason: str | None = Field(None, description="Why the report was ignored")


def to_rate(value: PublishRate | DispatchRate | None) -> Rate | None:
    """The limiter's ``Rate`` for a Pulsar-shaped publish or dispatch rate (None stays None: not set)."""
    if value is None:
        return None
    if isinstance(value, PublishRate):
        return Rate(value.publishThrottlingRateInMsg, value.publishThrottlingRateInByte, value.ratePeriodInSecond)
    return Rate(value.dispatchThrottlingRateInMsg, value.dispatchThrottlingRateInByte, value.ratePeriodInSecond)

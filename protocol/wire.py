"""The wire between participants and the control plane: one report in, one answer out; grants asked and given.

How it works
------------
Every report interval each participant (a Spark Python worker or the driver) POSTs one ``Report`` to the control
plane's ``/v1/report``. The report carries what the control plane relays (PIP-82: usage and demand per *shared
limit*, i.e. per (level, name, direction)) and what the dashboard shows (bucket snapshots, fairness queues,
counters, offload stats, mutation quotas). The answer, a ``ReportResponse``, carries the current policy version,
the full ``PolicySet`` only when the version the participant applied is not the current one, and the usage map of
every shared limit the participant reported: ``usage[limit_key][participant_id]``.

Between reports a participant asks ``POST /v1/grant`` (``GrantRequest``) for chunks of the shared limits it spends
(see "How a shared limit is held" in docs/architecture.md); one ``Grant`` answers each ``GrantAsk``.

Policy versions start at 1; a participant that applied nothing yet reports ``applied_policy_version = 0``.
Strictness (participants' messages strict, answers lenient): ``protocol.fields``.
"""

from __future__ import annotations

from pydantic import Field, StrictBool, model_validator

from .fields import (
    MAX_LIST,
    MAX_QUEUE_ENTRIES,
    MAX_QUEUES,
    Count,
    Direction,
    Kind,
    Label,
    LenientModel,
    LevelName,
    LimitKey,
    LimitValue,
    NonNeg,
    Number,
    Positive,
    StrictModel,
    limit_key,
)
from .policies import PolicySet

__all__ = [
    "Participant", "SharedUsage", "DimensionSnapshot", "BucketSnapshot", "QueueEntry", "QueueSnapshot",
    "LimiterCounters", "OffloadStats", "MutationQuotaSnapshot", "Report", "Goodbye", "Spend", "GrantAsk",
    "GrantRequest", "Grant", "GrantAnswer", "UsageValues", "ReportResponse", "MAX_SPENDS", "report_timeout_s",
]


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
    limit_bytes_per_s: LimitValue = Field(-1, description="Configured flow permits (bytes/s, -1 = off)")
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


MAX_SPENDS = 64   # spends per ask: a participant merges older ones (into the later time: counted longer, never less)
# the most asks a second of one shared limit, over all its participants, that the control plane aims at (fewer when
# many limits share its budget: ``controlplane.ask_pace``); a participant says its spends no more often (asks_apart_s)
MAX_ASKS_PER_S = 100.0


class Spend(StrictModel):
    """Tokens a participant spent of a shared limit since its last ask, and how long ago (``limiter.grants``)."""

    ago_s: NonNeg = Field(description="Seconds before the ask was sent")
    msgs: NonNeg = Field(0, description="Message tokens spent")
    bytes: NonNeg = Field(0, description="Byte tokens spent")


class Outcomes(StrictModel):
    """What the sink behind an adaptive limit answered to this participant's sends since its last ask
    (``limiter.adaptive``): sends it took, sends it refused as too many (429, 503), sends that failed otherwise,
    and the longest Retry-After it gave."""

    ok: NonNeg = Field(0, description="Sends the sink took")
    throttled: NonNeg = Field(0, description="Sends the sink refused as too many (HTTP 429 or 503)")
    errors: NonNeg = Field(0, description="Sends that failed for another reason (no congestion)")
    retry_after_s: NonNeg | None = Field(None, description="The longest Retry-After of the throttled sends, seconds")
    slowest_s: NonNeg | None = Field(None, description="The longest a send the sink took took, seconds (when known)")


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
    held_msgs: Number | None = Field(None, description=(
        "Message tokens it holds after this ask's return (negative: a debt). Given: its grants count until it "
        "reports them spent; left out: they count from when they were granted"))
    held_bytes: Number | None = Field(None, description="Byte tokens it holds after this ask's return")
    send_msgs: NonNeg = Field(0, description=(
        "The messages of its producers' next send: the one a producer waits on it to make, else the largest of the "
        "last few that waited (0: not known). With held_msgs: a send is charged whole, and what it will overdraw "
        "beyond the grant counts against the limit's next asks at once"))
    coming_msgs: NonNeg | None = Field(None, description=(
        "The messages its producers have in hand to send in their next sends, a batch cut into sends (left out: "
        "not known; 0: all of it is charged, and no send runs ahead of the grant). A micro-batch worker is granted "
        "them and its debt in one answer, within its share"))
    spent: list[Spend] = Field(default_factory=list, max_length=MAX_SPENDS,
                               description="What it spent since its last ask, oldest first")
    outcomes: Outcomes | None = Field(None, description="What the sink answered since its last ask (an adaptive "
                                                        "limit learns from it; any other ignores it)")
    fell_back: bool = Field(False, description=(
        "It ran at its fallback (safe) rate since its last answered ask -- its asks failed: no grant counts those "
        "spends, so nothing is refilled for that time"))

    @property
    def key(self) -> str:
        return limit_key(self.level, self.direction, self.name)


class GrantRequest(StrictModel):
    """``POST /v1/grant``: asks for tokens of shared limits, and tokens given back."""

    participant_id: Label = Field(description="The asking participant (as in its reports)")
    asks: list[GrantAsk] = Field(default_factory=list, max_length=MAX_LIST)
    sent_s: NonNeg | None = Field(None, description=(
        "The participant's clock (seconds, any origin) when it measured its spends' ago_s: the control plane dates "
        "them by it, not by when the asks arrived (an ask delayed on its way would count them late)"))

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
    pause_s: float = Field(0, description="The sink asked every sender of this adaptive limit to pause this long "
                                          "(its Retry-After): spend nothing of it until then")
    asks_apart_s: float = Field(0, description="How far apart to ask for this limit (0: not said)")

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
    usage_map: StrictBool = Field(True, description=(
        "True: the answer's usage map carries every live participant's usage of each shared limit reported "
        "(PIP-82's relay; a participant of 5,000 limits shared by 5 gets 25,000 entries back every interval). "
        "False: the answer carries only usageMissing, the keys the control plane holds nothing for (a participant "
        "whose shares come from grants needs no more)"))

    @model_validator(mode="after")
    def _unique(self) -> Report:
        def check(what: str, keys: list[tuple[str, ...]]) -> None:
            if len(set(keys)) == len(keys):   # (one set for the common case: every report holds hundreds)
                return
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
        sent = {limit_key(u.level, u.direction, u.name) for u in self.usage} if self.usage_unchanged else set()
        both = sorted(sent.intersection(self.usage_unchanged))
        if both:
            raise ValueError(f"limit key(s) {', '.join(map(repr, both))} appear both in usage and in "
                             "usage_unchanged: send each either in full or as unchanged")
        return self


def report_timeout_s(interval_s: float) -> float:
    """How long a participant reporting every ``interval_s`` waits for an answer before it gives the round up (and
    backs off): two intervals, 0.5-5 s. A control plane behind by more than that works for nobody."""
    return min(5.0, max(0.5, 2 * interval_s))


class Goodbye(StrictModel):
    participant_id: Label


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
    reportIntervalSeconds: float = Field(description="The interval participants should report at: the configured "
                                                     "one, or longer while reports would take more than their "
                                                     "share of the control plane's CPU")
    nextReportInSeconds: float | None = Field(None, description=(
        "When to send the next report, in seconds from this answer: the participant's place in the interval, so "
        "that the reports of all participants arrive spread evenly over it (half to one and a half intervals; "
        "null for a participant the control plane does not hold as live)"))
    accepted: bool = Field(True, description="False when the report was ignored (stale or out of sequence)")
    reason: str | None = Field(None, description="Why the report was ignored")
    usageMissing: list[str] = Field(default_factory=list, description=(
        "Limit keys of the report (usage or usage_unchanged) the control plane holds no usage of this participant "
        "for: send them in full next time (a restarted control plane, a report that was not accepted)"))

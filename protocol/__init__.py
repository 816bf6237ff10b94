"""The protocol between throttlescope's processes: what participants send, what the control plane answers, the
policies (Pulsar-shaped) with the rules that read them, and the typed views the dashboard reads.

- ``protocol.fields``: the field types and the two strictness rules (participants' messages strict, answers
  lenient);
- ``protocol.wire``: ``Report`` and ``ReportResponse`` (``/v1/report``), ``GrantRequest`` and ``GrantAnswer``
  (``/v1/grant``), ``Goodbye``;
- ``protocol.policies``: ``PolicySet`` and the policy objects in it;
- ``protocol.rules``: what limit applies at a (level, direction, name) and from where (``PolicyView``,
  ``applicable``) -- the one reading of the policies that participants, the control plane and the metrics share.

It imports only ``limiter`` (see docs/architecture.md). Everything public is importable from here.
"""

from __future__ import annotations

from .fields import (
    MAX_COUNT,
    MAX_LIST,
    MAX_NAME,
    MAX_NUMBER,
    MAX_QUEUE_ENTRIES,
    MAX_QUEUES,
    QUOTA_STRATEGIES,
    Direction,
    Kind,
    LenientModel,
    LimitKey,
    LimitValue,
    QuotaStrategyName,
    StrictModel,
    limit_key,
    parse_limit_key,
    unknown_field_reason,
)
from .policies import (
    DispatchRate,
    LevelPolicies,
    MutationQuota,
    MutationQuotaEntry,
    PolicySet,
    PublishRate,
    ResourceGroup,
    SubscriptionPolicies,
    TenantPolicies,
    to_rate,
)
from .rules import (
    BROKER_DEFAULTS,
    BROKER_TOTALS,
    DISPATCH,
    PUBLISH,
    SHARED_LEVELS,
    UNLIMITED_MUTATIONS_PER_S,
    Limit,
    PolicyView,
    applicable,
    resource_group_for,
    setting_rate,
    split_topic,
)
from .wire import (
    MAX_ASKS_PER_S,
    MAX_SPENDS,
    BucketSnapshot,
    DimensionSnapshot,
    Goodbye,
    Grant,
    GrantAnswer,
    GrantAsk,
    GrantRequest,
    LimiterCounters,
    MutationQuotaSnapshot,
    OffloadStats,
    Outcomes,
    Participant,
    QueueEntry,
    QueueSnapshot,
    Report,
    ReportResponse,
    SharedUsage,
    Spend,
    UsageValues,
    report_timeout_s,
)

__all__ = [
    "MAX_COUNT", "MAX_LIST", "MAX_NAME", "MAX_NUMBER", "MAX_QUEUE_ENTRIES", "MAX_QUEUES", "QUOTA_STRATEGIES", "Direction", "Kind",
    "LenientModel", "LimitKey", "LimitValue", "QuotaStrategyName", "StrictModel", "limit_key", "parse_limit_key",
    "unknown_field_reason",
    "DispatchRate", "LevelPolicies", "MutationQuota", "MutationQuotaEntry", "PolicySet", "PublishRate",
    "ResourceGroup", "SubscriptionPolicies", "TenantPolicies", "to_rate",
    "BROKER_DEFAULTS", "BROKER_TOTALS", "DISPATCH", "PUBLISH", "SHARED_LEVELS", "UNLIMITED_MUTATIONS_PER_S", "Limit",
    "PolicyView", "applicable", "resource_group_for", "setting_rate", "split_topic",
    "BucketSnapshot", "DimensionSnapshot", "Goodbye", "Grant", "GrantAnswer", "GrantAsk", "GrantRequest",
    "LimiterCounters", "MutationQuotaSnapshot", "OffloadStats", "Outcomes", "Participant", "QueueEntry", "QueueSnapshot",
    "Report", "ReportResponse", "SharedUsage", "Spend", "UsageValues", "MAX_SPENDS", "MAX_ASKS_PER_S",
    "report_timeout_s",
]

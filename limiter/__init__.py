"""throttlescope's limiter core: pure Python, no I/O, imports nothing else of the project.

The names below are the public API; each module opens with an essay on how it works and why.
"""

from .adaptive import AdaptiveRate, AdaptiveSnapshot, Outcome
from .bucket import DEFAULT_RESOLUTION_S, AsyncTokenBucket
from .clock import Clock, ManualClock, Scheduler, SystemClock, ThreadScheduler, TimerHandle, scheduler_for
from .counter import ExactCounter
from .dispatch import (
    DEFAULT_BACKOFF_S,
    DEFAULT_READ_BATCH_SIZE,
    Dispatcher,
    DispatchRateLimiter,
    ReadPlan,
    per_partition,
    resolve_dispatch_rate,
    resolve_subscription_dispatch_rate,
)
from .levels import PublishLimits, split_topic
from .mutation import (
    MutationQuota,
    MutationQuotaConfig,
    MutationQuotaRegistry,
    ThrottlingQuotaExceeded,
    call_with_mutation_quota,
)
from .offload import OffloadStats, OffloadThrottle, ReadTicket, ThrottledReader, throttled_chunks
from .policy import Level, PolicyError, Rate, resolve
from .producer import Producer, ProducerPaused
from .publish import BucketSnapshot, LimiterSnapshot, PublishRateLimiter, QueueEntry
from .throttle import ThrottleReason, ThrottleTracker

__all__ = [
    "AdaptiveRate", "AdaptiveSnapshot", "Outcome",
    "AsyncTokenBucket", "DEFAULT_RESOLUTION_S",
    "Clock", "ManualClock", "Scheduler", "SystemClock", "ThreadScheduler", "TimerHandle", "scheduler_for",
    "ExactCounter",
    "DEFAULT_BACKOFF_S", "DEFAULT_READ_BATCH_SIZE", "Dispatcher", "DispatchRateLimiter", "ReadPlan",
    "per_partition", "resolve_dispatch_rate", "resolve_subscription_dispatch_rate",
    "MutationQuota", "MutationQuotaConfig", "MutationQuotaRegistry", "ThrottlingQuotaExceeded",
    "call_with_mutation_quota",
    "OffloadStats", "OffloadThrottle", "ReadTicket", "ThrottledReader", "throttled_chunks",
    "PublishLimits", "split_topic",
    "Level", "PolicyError", "Rate", "resolve",
    "Producer", "ProducerPaused",
    "BucketSnapshot", "LimiterSnapshot", "PublishRateLimiter", "QueueEntry",
    "ThrottleReason", "ThrottleTracker",
]

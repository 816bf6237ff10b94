"""Limits as small value objects, the levels they apply at, and the precedence between them.

A ``Rate`` is Pulsar's PublishRate / DispatchRate: ``msgs`` and ``bytes`` per ``period_s`` seconds, enforced
together (logical AND). ``-1`` means unlimited, and so does 0 or any negative number (Pulsar: "a limit of 0 or
less disables that bucket"); ``Rate.unlimited()`` is the canonical form.

Levels
------
A producer is subject to one limiter per level that applies to it, all at once:

==============  =====================================================================  =======================
level           what it limits                                                         spans processes?
==============  =====================================================================  =======================
broker          everything this process (one Spark Python worker, or the driver) sends  no (its own limit)
resource_group  everything of the namespaces/tenants attached to the group (PIP-82)   yes (shared quota)
tenant          everything of one tenant                                               yes
namespace       everything of one namespace                                            yes
topic           one topic (each partition of a partitioned topic)                      yes
subscription    one subscription's dispatch (reading)                                   yes
==============  =====================================================================  =======================

Precedence
----------
The limit a topic gets for *itself* comes from the most specific place that sets one: topic policy >
namespace policy (Pulsar's namespace ``publishRate`` is the default for each of its topics) > broker default.
``resolve`` returns the value with the level it came from, so operators can ask "what applies here, and why".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .checks import at_least_zero, positive

__all__ = ["Level", "Rate", "PolicyError", "resolve", "UNLIMITED"]

UNLIMITED = -1


class PolicyError(ValueError):
    """A limit or policy that is not valid; the message says what is wrong and what is allowed."""


class Level(StrEnum):
    BROKER = "broker"
    RESOURCE_GROUP = "resource_group"
    TENANT = "tenant"
    NAMESPACE = "namespace"
    TOPIC = "topic"
    SUBSCRIPTION = "subscription"

    def __str__(self) -> str:
        return self.value


def check_limit(name: str, value: Any) -> float:
    """A limit is a finite number >= 0, or exactly -1 (unlimited). Returns it; raises PolicyError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(f"{name} must be a number (>= 0, or -1 for unlimited), got {value!r}")
    if not math.isfinite(value) or (value < 0 and value != UNLIMITED):
        raise PolicyError(f"{name} must be a finite number >= 0, or -1 for unlimited, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Rate:
    """msgs and bytes per period_s; each <= 0 means unlimited for that dimension."""

    msgs: float = UNLIMITED
    bytes: float = UNLIMITED
    period_s: float = 1.0

    def __post_init__(self) -> None:
        check_limit("msgs", self.msgs)
        check_limit("bytes", self.bytes)
        positive("period_s", self.period_s, unit="seconds", error=PolicyError)

    @classmethod
    def unlimited(cls) -> Rate:
        return cls()

    @property
    def msgs_limited(self) -> bool:
        return self.msgs > 0

    @property
    def bytes_limited(self) -> bool:
        return self.bytes > 0

    @property
    def is_unlimited(self) -> bool:
        return not (self.msgs_limited or self.bytes_limited)

    def msgs_per_s(self) -> float:
        return self.msgs / self.period_s if self.msgs_limited else math.inf

    def bytes_per_s(self) -> float:
        return self.bytes / self.period_s if self.bytes_limited else math.inf

    def scaled(self, factor: float) -> Rate:
        """The same limit times ``factor`` (a local share of a shared limit); unlimited stays unlimited."""
        at_least_zero("a share factor", factor, error=PolicyError)
        return Rate(
            self.msgs * factor if self.msgs_limited else UNLIMITED,
            self.bytes * factor if self.bytes_limited else UNLIMITED,
            self.period_s,
        )

    def is_raise_of(self, old: Rate) -> bool:
        """True if no dimension got stricter than in ``old`` (removed or raised limits only)."""
        return _not_stricter(self.msgs_per_s(), old.msgs_per_s()) and _not_stricter(self.bytes_per_s(), old.bytes_per_s())

    def __str__(self) -> str:
        def one(v: float, unit: str) -> str:
            return f"{v:g} {unit}" if v > 0 else f"unlimited {unit}"
        return f"{one(self.msgs, 'msgs')}, {one(self.bytes, 'bytes')} per {self.period_s:g}s"


def _not_stricter(new: float, old: float) -> bool:
    return new >= old


def resolve(*candidates: tuple[Level, Rate | None]) -> tuple[Rate, Level | None]:
    """The first candidate that is set (not None), most specific first, with the level it came from.

    ``resolve((Level.TOPIC, topic_rate), (Level.NAMESPACE, ns_rate), (Level.BROKER, broker_default))``.
    When none is set the answer is unlimited, from no level.
    """
    for level, rate in candidates:
        if rate is not None:
            return rate, level
    return Rate.unlimited(), None

"""The broker dynamic settings (Pulsar's names), their types, defaults and meaning.

"Broker" is one participant process: broker-level limits apply to each process on its own. Rate
settings follow Pulsar: a finite number >= 0, or -1; 0 or -1 disables the limit. Choice settings take one of
their listed words. Values arrive as path text
(``POST /admin/v2/brokers/configuration/{name}/{value}``) and are parsed here per type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from limiter.policy import PolicyError, check_limit


@dataclass(frozen=True)
class Setting:
    type: Literal["rate", "bool", "choice"]
    default: float | bool | str
    doc: str
    choices: tuple[str, ...] = ()


SETTINGS: dict[str, Setting] = {
    "brokerPublishThrottlingMaxMessageRate": Setting("rate", 0, "broker-wide publish limit, messages/s"),
    "brokerPublishThrottlingMaxByteRate": Setting("rate", 0, "broker-wide publish limit, bytes/s"),
    "dispatchThrottlingRateInMsg": Setting("rate", 0, "broker-wide dispatch limit, messages/s"),
    "dispatchThrottlingRateInByte": Setting("rate", 0, "broker-wide dispatch limit, bytes/s"),
    "dispatchThrottlingRatePerTopicInMsg": Setting("rate", 0, "default dispatch limit per topic, messages/s"),
    "dispatchThrottlingRatePerTopicInByte": Setting("rate", 0, "default dispatch limit per topic, bytes/s"),
    "dispatchThrottlingRatePerSubscriptionInMsg": Setting(
        "rate", 0, "default dispatch limit per subscription, messages/s"),
    "dispatchThrottlingRatePerSubscriptionInByte": Setting(
        "rate", 0, "default dispatch limit per subscription, bytes/s"),
    "maxPublishRatePerTopicInMessages": Setting("rate", 0, "default publish limit per topic, messages/s"),
    "maxPublishRatePerTopicInBytes": Setting("rate", 0, "default publish limit per topic, bytes/s"),
    "dispatchThrottlingOnBatchMessageEnabled": Setting(
        "bool", False, "count dispatched entries (batches) instead of messages"),
    "preciseDispatcherFlowControl": Setting(
        "bool", False, "size reads by the average messages per entry (exclusive with batch counting)"),
    "dispatchThrottlingOnNonBacklogConsumerEnabled": Setting(
        "bool", True, "throttle dispatch even when every consumer of a subscription has no backlog"),
    "managedLedgerOffloadBrokerFlowPermitsPerSecond": Setting(
        "rate", -1, "offload read flow permits, bytes/s (PIP-211); -1 or 0 = off"),
    "defaultQuotaStrategy": Setting(
        "choice", "fair", "how participants split a shared quota (tenant, topic, subscription, and resource groups "
        "without their own quotaStrategy): fair (max-min by demand) or proportional (Pulsar's, by usage)",
        ("fair", "proportional")),
}
MUTUALLY_EXCLUSIVE = ("preciseDispatcherFlowControl", "dispatchThrottlingOnBatchMessageEnabled")


class SettingError(ValueError):
    pass


def unknown_reason(name: str) -> str:
    return f"unknown or non-dynamic broker setting {name!r}; the dynamic settings are: {', '.join(SETTINGS)}"


def parse_value(name: str, text: str) -> float | bool | str:
    """Parse ``text`` for setting ``name`` (which must exist). Raises SettingError saying what is allowed."""
    setting = SETTINGS[name]
    if setting.type == "choice":
        low = text.strip().lower()
        if low not in setting.choices:
            raise SettingError(f"{name} must be one of {', '.join(map(repr, setting.choices))}, got {text!r}")
        return low
    if setting.type == "bool":
        low = text.strip().lower()
        if low not in ("true", "false"):
            raise SettingError(f"{name} is a boolean: 'true' or 'false', got {text!r}")
        return low == "true"
    try:
        value: float = float(text)
    except ValueError:
        raise SettingError(f"{name} must be a number (>= 0, or -1 to disable), got {text!r}") from None
    if math.isfinite(value) and value == int(value) and abs(value) < 2**53:
        value = int(value)
    try:
        return check_limit(name, value)
    except PolicyError as e:
        raise SettingError(str(e)) from None


def effective(overrides: dict[str, float | bool | str]) -> dict[str, float | bool | str]:
    """Every setting's current value: the stored override, else the default."""
    return {name: overrides.get(name, s.default) for name, s in SETTINGS.items()}

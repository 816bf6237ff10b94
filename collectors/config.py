"""The participant runtime's settings, read from the environment (Spark passes them with ``spark.executorEnv.*``).

==================================  ==========================================================================
variable                            meaning
==================================  ==========================================================================
THROTTLESCOPE_URL                   the control plane, ``http(s)://host:port``; unset or empty: no control
                                    plane -- local static limits only, no reporter thread, no network at all
THROTTLESCOPE_TOKEN                 the participant token (``Authorization: Bearer``)
THROTTLESCOPE_REPORT_INTERVAL_S     seconds between reports, 0.05..3600 (default 1). Until the first answer;
                                    then the control plane's ``reportIntervalSeconds`` is followed, because it
                                    expires participants silent for 2 of *its* intervals
THROTTLESCOPE_REPORT_TOLERANCE_PCT  PIP-82 report suppression: usage/demand moves under this % are not resent
                                    (default 5, 0..100; 0 = always send)
THROTTLESCOPE_REPORT_MAX_ROUNDS     every shared limit's usage is sent at least once every N reports (default
                                    5, 1..1000): PIP-82's mandatory report
THROTTLESCOPE_BACKOFF_MAX_S         longest wait between attempts while the control plane is unreachable
                                    (default 10 report intervals, at least 1 s, at most 30 s; 0.05..3600)
THROTTLESCOPE_APP_ID                application id (else SPARK_APPLICATION_ID, else the active SparkContext's,
                                    else 'local')
THROTTLESCOPE_EXECUTOR_ID           executor id (else SPARK_EXECUTOR_ID, else 'executor' inside a Spark task,
                                    else 'driver')
==================================  ==========================================================================

A bad value raises ``ConfigError`` naming the variable, the value and what is allowed: the first
``participant()`` call of the process fails loudly rather than running with limits nobody chose.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from limiter.quota import DEFAULT_MAX_ROUNDS, DEFAULT_TOLERANCE_PCT

__all__ = ["ConfigError", "RuntimeConfig", "MIN_INTERVAL_S", "MAX_INTERVAL_S"]

MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 3600.0
DEFAULT_INTERVAL_S = 1.0

URL = "THROTTLESCOPE_URL"
TOKEN = "THROTTLESCOPE_TOKEN"
INTERVAL = "THROTTLESCOPE_REPORT_INTERVAL_S"
TOLERANCE = "THROTTLESCOPE_REPORT_TOLERANCE_PCT"
MAX_ROUNDS = "THROTTLESCOPE_REPORT_MAX_ROUNDS"
BACKOFF_MAX = "THROTTLESCOPE_BACKOFF_MAX_S"
APP_ID = "THROTTLESCOPE_APP_ID"
EXECUTOR_ID = "THROTTLESCOPE_EXECUTOR_ID"


class ConfigError(ValueError):
    """A setting of the participant runtime is not valid; the message names it and says what is allowed."""


def _seconds(name: str, text: str, low: float = MIN_INTERVAL_S, high: float = MAX_INTERVAL_S) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"{name} must be a number of seconds {low:g}..{high:g}, got {text!r}")
    return value


def _url(text: str) -> str | None:
    text = text.strip()
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(f"{URL} must be the control plane's base URL, http(s)://host[:port][/path], got {text!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError(f"{URL} has an invalid port: {text!r}") from None
    return text.rstrip("/")


@dataclass(frozen=True)
class RuntimeConfig:
    url: str | None = None
    token: str | None = field(default=None, repr=False)
    report_interval_s: float = DEFAULT_INTERVAL_S
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT
    max_rounds: int = DEFAULT_MAX_ROUNDS
    backoff_max_s: float | None = None
    app_id: str | None = None
    executor_id: str | None = None

    def __post_init__(self) -> None:
        if not (MIN_INTERVAL_S <= self.report_interval_s <= MAX_INTERVAL_S):
            raise ConfigError(f"report_interval_s must be {MIN_INTERVAL_S:g}..{MAX_INTERVAL_S:g} s, "
                              f"got {self.report_interval_s!r}")
        if not (0 <= self.tolerance_pct <= 100):
            raise ConfigError(f"tolerance_pct must be 0..100, got {self.tolerance_pct!r}")
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int) or not 1 <= self.max_rounds <= 1000:
            raise ConfigError(f"max_rounds must be an integer 1..1000, got {self.max_rounds!r}")
        if self.backoff_max_s is not None and not (MIN_INTERVAL_S <= self.backoff_max_s <= MAX_INTERVAL_S):
            raise ConfigError(f"backoff_max_s must be {MIN_INTERVAL_S:g}..{MAX_INTERVAL_S:g} s, got {self.backoff_max_s!r}")

    def backoff_cap_s(self, interval_s: float) -> float:
        """The longest wait between attempts while the control plane is unreachable."""
        if self.backoff_max_s is not None:
            return max(self.backoff_max_s, interval_s)
        return max(interval_s, min(30.0, max(1.0, 10 * interval_s)))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RuntimeConfig:
        """Read the THROTTLESCOPE_* variables (see the module doc). Raises ConfigError on a bad value."""
        env = os.environ if env is None else env
        kw: dict = {"url": _url(env.get(URL, "")), "token": env.get(TOKEN) or None}
        if kw["token"] is not None and (any(c.isspace() or not c.isprintable() for c in kw["token"])
                                        or len(kw["token"]) > 1024):
            raise ConfigError(f"{TOKEN} must be printable ASCII without spaces, at most 1024 characters")
        if env.get(INTERVAL, "").strip():
            kw["report_interval_s"] = _seconds(INTERVAL, env[INTERVAL])
        if env.get(TOLERANCE, "").strip():
            text = env[TOLERANCE]
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and 0 <= value <= 100):
                raise ConfigError(f"{TOLERANCE} must be a percentage 0..100, got {text!r}")
            kw["tolerance_pct"] = value
        if env.get(MAX_ROUNDS, "").strip():
            text = env[MAX_ROUNDS]
            try:
                rounds = int(text)
            except ValueError:
                rounds = 0
            if not 1 <= rounds <= 1000:
                raise ConfigError(f"{MAX_ROUNDS} must be a whole number of reports 1..1000, got {text!r}")
            kw["max_rounds"] = rounds
        if env.get(BACKOFF_MAX, "").strip():
            kw["backoff_max_s"] = _seconds(BACKOFF_MAX, env[BACKOFF_MAX])
        kw["app_id"] = env.get(APP_ID) or None
        kw["executor_id"] = env.get(EXECUTOR_ID) or None
        return cls(**kw)

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
THROTTLESCOPE_READY_TIMEOUT_S       how long the Spark helpers' first producer in a worker waits for the first
                                    policies before sending (default 10, 0..3600; 0: do not wait)
THROTTLESCOPE_SHIP_LIBRARY          on the driver: ``configure()`` ships the library to the executors (default
                                    1; 0/false/no/off when the cluster's image already has it)
THROTTLESCOPE_GC_FREEZE             in a Spark task's Python worker: the Spark helpers' first producer freezes
                                    the objects the worker holds then (``gc.freeze``), so that PySpark's full
                                    collection after every task does not scan them again (default 1; 0/false/
                                    no/off to leave the collector alone -- ``collectors.spark`` says why)
==================================  ==========================================================================

A bad value raises ``ConfigError`` naming the variable, the value and what is allowed: the first
``participant()`` call of the process fails loudly rather than running with limits nobody chose. Read through
``protocol.settings`` (pydantic-settings), as the control plane's and the dashboard's settings are.
"""

from __future__ import annotations

from pydantic import Field

from limiter.quota import DEFAULT_MAX_ROUNDS, DEFAULT_TOLERANCE_PCT
from protocol.settings import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    PREFIX,
    BearerToken,
    ConfigError,
    ControlPlaneUrl,
    EnvSettings,
    IntervalSeconds,
    between,
    switch,
    whole_between,
)

__all__ = ["ConfigError", "RuntimeConfig", "MIN_INTERVAL_S", "MAX_INTERVAL_S"]

DEFAULT_INTERVAL_S = 1.0
DEFAULT_READY_TIMEOUT_S = 10.0


class RuntimeConfig(EnvSettings):
    """The participant's settings (the variables above); ``RuntimeConfig(...)`` takes them as keywords."""

    url: ControlPlaneUrl = None
    token: BearerToken = Field(None, repr=False)
    report_interval_s: IntervalSeconds = DEFAULT_INTERVAL_S
    tolerance_pct: between(0, 100, "a percentage") = Field(
        DEFAULT_TOLERANCE_PCT, validation_alias=PREFIX + "REPORT_TOLERANCE_PCT")
    max_rounds: whole_between(1, 1000, "a whole number of reports") = Field(
        DEFAULT_MAX_ROUNDS, validation_alias=PREFIX + "REPORT_MAX_ROUNDS")
    backoff_max_s: IntervalSeconds | None = None
    app_id: str | None = None
    executor_id: str | None = None
    ready_timeout_s: between(0, MAX_INTERVAL_S, "a number of seconds") = DEFAULT_READY_TIMEOUT_S
    ship_library: switch() = True
    gc_freeze: switch() = True

    def backoff_cap_s(self, interval_s: float) -> float:
        """The longest wait between attempts while the control plane is unreachable."""
        return backoff_cap_s(interval_s, self.backoff_max_s)


def backoff_cap_s(interval_s: float, backoff_max_s: float | None = None) -> float:
    """The longest wait between a reporter's attempts while the control plane is unreachable: ``backoff_max_s``
    (at least the interval) when set, else ten intervals within 1-30 s."""
    if backoff_max_s is not None:
        return max(backoff_max_s, interval_s)
    return max(interval_s, min(30.0, max(1.0, 10 * interval_s)))

"""Mutation quotas: Kafka's KIP-599 token bucket for control operations (create/delete topics, partitions...).

How it works and why
--------------------
A ``MutationQuota`` allows ``quota_per_s`` (Q) mutations per second on average, with a burst of
``burst = quota_per_s * samples * window_s`` (B = Q*S*W: the burst Kafka's windowed quota of S samples of W
seconds already allowed, so existing configurations keep their meaning). ``_tokens`` (K) starts full at B and is
refilled lazily on every call, never by a timer::

    K = min(B, K + Q * elapsed_s)

``record(n)`` charges n mutations (a request creating 7 topics of 80 partitions is n = 560). Unlike a plain
token bucket, K may go negative: one request is never split, so it may overdraw a bucket that still had tokens,
and the debt is then repaid at Q tokens a second. The time to repay it is ``-K / Q`` while K < 0; the debt stays
visible in ``tokens()`` whatever the mode.

Admission and throttle time, exactly as Kafka does them (``ControllerMutationQuotaManager``):
- strict (the controller's mutation quota, ``StrictControllerMutationQuota``): check first -- K < 0 raises
  ``ThrottlingQuotaExceeded`` carrying the throttle time ``-K / Q``, and nothing is recorded; otherwise record.
  The check does not look at n, so one request may take the bucket from >= 0 to far below 0 -- and that request
  is *not* throttled: ``record`` returns 0, as Kafka answers it with a throttle time of 0. Only a rejected
  request carries a throttle time; ``throttle_time_s()`` is the last rejection's, counting down with time
  (Kafka's ``lastThrottleTimeMs`` less the time since), and 0 until a request is rejected.
- permissive (``PermissiveControllerMutationQuota``): record, never reject; a request that leaves K < 0 is
  throttled, so ``record`` returns ``-K / Q`` and ``throttle_time_s()`` is ``-K / Q`` at any time.
A negative n un-records (gives tokens back, still capped at B) and is never rejected.

Worked example (the KIP's: Q = 5/s, S = 100 samples of W = 1 s, so B = 500), strict
-------------------------------------------------------------------------------------
t=0   tokens() = 500 (full).
t=0   record(560): K = 500 >= 0 -> admitted, throttle time 0; K = 500 - 560 = -60 (tokens() shows the debt).
t=0   record(1): K = -60 < 0 -> ThrottlingQuotaExceeded(throttle_time_s=12.0) (60 / 5); nothing recorded;
      throttle_time_s() = 12 s.
t=6   K = -60 + 5*6 = -30 -> throttle_time_s() = 6 s.   t=12: K = 0 -> admitted again.
Kafka's own test (StrictControllerMutationQuotaTest: Q = 10/s, 10 samples of 1 s, B = 100): record(90) and
record(90) are both admitted with throttle time 0 (K = 10, then -80); the third record(90) is rejected with 8 s;
5 s later the throttle time is 3 s. Permissive, the same calls: 0, 8 s, then 17 s (K = -170), 12 s 5 s later.

Consistency rules
-----------------
1. K never exceeds B: refills and un-records are capped; a live change of Q (or S, W) first settles the refill
   at the old Q up to now, then recomputes B and trims K to it. No tokens are invented, no debt is forgiven.
2. Every state change happens under the quota's lock, so concurrent ``record`` calls are charged exactly once
   each and a strict check and its record are one atomic step.
3. ``mutation_rate_per_s()`` is Kafka's ``mutation-rate`` metric: what was recorded in the last S windows of
   W seconds, divided by S*W (560 at t=0 reads 5.6/s, as in the KIP). It is for observation only.

``MutationQuotaRegistry`` holds one quota per (user, client-id), configured by the control plane's mapping of
``(user, client_id) -> MutationQuotaConfig`` and resolved with Kafka's precedence, most specific first:
(user, client), (user, <default>), (user, None), (<default>, client), (<default>, <default>), (<default>, None),
(None, client), (None, <default>); ``None`` means "not part of the entity", ``DEFAULT`` is Kafka's ``<default>``.
Entities that match the same entry share one bucket only where the entry leaves them unnamed (None): a
``(user, None)`` entry is one bucket for all of that user's clients; a ``<default>`` entry is a bucket per user
(or client). Nothing matched = unlimited (``get`` returns None).

``call_with_mutation_quota`` is the client side: the error is retryable, so it waits the throttle time (through
an injectable ``sleep``, by default ``clock.sleep``) and tries again, until its own timeout; like Kafka's admin
client it gives up at once, re-raising, when the throttle time would run past that timeout.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .checks import at_least_zero, finite, positive
from .clock import NS_PER_S, Clock, SystemClock

__all__ = ["MutationQuota", "ThrottlingQuotaExceeded", "MutationQuotaConfig", "MutationQuotaRegistry",
           "call_with_mutation_quota", "DEFAULT", "DEFAULT_SAMPLES", "DEFAULT_WINDOW_S"]

DEFAULT = "<default>"
DEFAULT_SAMPLES = 11
DEFAULT_WINDOW_S = 1.0
T = TypeVar("T")


class ThrottlingQuotaExceeded(Exception):
    """A strict mutation quota refused the request; retry after ``throttle_time_s`` (Kafka: retryable)."""

    retryable = True

    def __init__(self, throttle_time_s: float):
        self.throttle_time_s = float(throttle_time_s)
        super().__init__(f"mutation quota exceeded: throttled for {self.throttle_time_s:.3f} s; "
                         "retry after that (the request was not recorded)")

    def __reduce__(self):  # picklable across Spark workers
        return (type(self), (self.throttle_time_s,))


def _samples(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"samples must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class MutationQuotaConfig:
    """One control-plane entry: Q mutations/s, S samples of W seconds (burst Q*S*W), strict or permissive."""

    quota_per_s: float
    window_s: float = DEFAULT_WINDOW_S
    samples: int = DEFAULT_SAMPLES
    strict: bool = True

    def __post_init__(self) -> None:
        positive("quota_per_s", self.quota_per_s)
        positive("window_s", self.window_s)
        _samples(self.samples)
        if not isinstance(self.strict, bool):
            raise ValueError(f"strict must be True or False, got {self.strict!r}")

    @classmethod
    def of(cls, value: MutationQuotaConfig | Mapping[str, Any]) -> MutationQuotaConfig:
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"a mutation quota config must be a MutationQuotaConfig or a mapping with "
                             f"quota_per_s, window_s, samples, strict; got {value!r}")
        unknown = set(value) - {"quota_per_s", "window_s", "samples", "strict"}
        if unknown or "quota_per_s" not in value:
            raise ValueError(f"a mutation quota config needs quota_per_s and may have window_s, samples, strict; "
                             f"got keys {sorted(value)}")
        return cls(**value)


class MutationQuota:
    """Kafka's KIP-599 token bucket (see the module essay). Thread-safe."""

    def __init__(self, quota_per_s: float, window_s: float = DEFAULT_WINDOW_S, samples: int = DEFAULT_SAMPLES,
                 strict: bool = True, clock: Clock | None = None):
        cfg = MutationQuotaConfig(quota_per_s, window_s, samples, strict)
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._quota, self._window_s, self._samples, self.strict = cfg.quota_per_s, cfg.window_s, cfg.samples, strict
        self._burst = self._quota * self._samples * self._window_s
        self._tokens = self._burst
        self._last_ns = self._clock.now_ns()
        self._rejected_s, self._rejected_ns = 0.0, self._last_ns  # strict: the last rejection's throttle time
        self._recorded: deque[list] = deque()  # [window start ns, amount], for the mutation-rate metric

    # --- admission ----------------------------------------------------------------------------------------

    def record(self, n: float = 1) -> float:
        """Charge n mutations (negative: un-record). Returns the throttle time of this request: strict, always 0
        (an admitted request is not throttled, even one that overdraws); permissive, ``-tokens / quota`` after
        recording. Strict: raises ThrottlingQuotaExceeded, recording nothing, while the bucket is below zero."""
        finite("n", n, unit="mutations", rule=" (negative un-records)")
        with self._lock:
            now = self._refill()
            if self.strict and n > 0 and self._tokens < 0:
                self._rejected_s, self._rejected_ns = -self._tokens / self._quota, now
                raise ThrottlingQuotaExceeded(self._rejected_s)
            self._tokens = min(self._burst, self._tokens - n)
            self._note_rate(now, n)
            return 0.0 if self.strict else self._debt_s()

    # --- reads --------------------------------------------------------------------------------------------

    def tokens(self) -> float:
        with self._lock:
            self._refill()
            return self._tokens

    def throttle_time_s(self) -> float:
        """What the quota reports as its throttle time now (see the module essay): strict, the last rejection's
        throttle time less the time since (0 when none is pending); permissive, the time to repay the debt."""
        with self._lock:
            now = self._refill()
            if self.strict:
                return max(0.0, self._rejected_s - (now - self._rejected_ns) / NS_PER_S)
            return self._debt_s()

    def mutation_rate_per_s(self) -> float:
        with self._lock:
            self._note_rate(self._clock.now_ns(), 0)
            return sum(amount for _, amount in self._recorded) / (self._samples * self._window_s)

    @property
    def burst(self) -> float:
        return self._burst

    @property
    def window_s(self) -> float:
        return self._window_s

    @property
    def samples(self) -> int:
        return self._samples

    @property
    def quota_per_s(self) -> float:
        return self._quota

    @quota_per_s.setter
    def quota_per_s(self, value: float) -> None:
        self.reconfigure(MutationQuotaConfig(value, self._window_s, self._samples, self.strict))

    def reconfigure(self, config: MutationQuotaConfig) -> None:
        """Apply a changed config live: settle the refill at the old quota, then recompute the burst and cap."""
        with self._lock:
            self._refill()
            self._quota, self._window_s, self._samples = config.quota_per_s, config.window_s, config.samples
            self.strict = config.strict
            self._burst = self._quota * self._samples * self._window_s
            self._tokens = min(self._tokens, self._burst)

    def snapshot(self) -> dict[str, float]:
        return {"quota_per_s": self._quota, "burst": self._burst, "tokens": self.tokens(),
                "mutation_rate_per_s": self.mutation_rate_per_s(), "throttle_time_s": self.throttle_time_s()}

    def __repr__(self) -> str:
        return (f"MutationQuota(quota_per_s={self._quota}, window_s={self._window_s}, samples={self._samples}, "
                f"strict={self.strict}, tokens~{self._tokens:g})")

    # --- internals (under the lock) -----------------------------------------------------------------------

    def _debt_s(self) -> float:
        return -self._tokens / self._quota if self._tokens < 0 else 0.0

    def _refill(self) -> int:
        now = self._clock.now_ns()
        if now > self._last_ns:  # an older reading counts as no time passed
            self._tokens = min(self._burst, self._tokens + self._quota * (now - self._last_ns) / NS_PER_S)
            self._last_ns = now
        return now

    def _note_rate(self, now: int, n: float) -> None:
        window_ns = int(self._window_s * NS_PER_S)
        recorded = self._recorded
        while recorded and recorded[0][0] <= now - window_ns * self._samples:
            recorded.popleft()
        if n:
            if recorded and now < recorded[-1][0] + window_ns:
                recorded[-1][1] += n
            else:
                recorded.append([now - now % window_ns, n])


Key = tuple[str | None, str | None]


class MutationQuotaRegistry:
    """Mutation quotas per (user, client_id), configured live from the control plane (see the module essay)."""

    def __init__(self, configs: Mapping[Key, MutationQuotaConfig | Mapping[str, Any]] | None = None,
                 clock: Clock | None = None):
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._configs: dict[Key, MutationQuotaConfig] = {}
        self._quotas: dict[tuple[Key, Key], MutationQuota] = {}  # (config entry, bucket entity) -> quota
        self.apply(configs or {})

    def apply(self, configs: Mapping[Key, MutationQuotaConfig | Mapping[str, Any]]) -> None:
        """Replace the configs: changed entries update their quotas live (tokens kept), removed ones are dropped.
        Every entry is validated first, so a bad one changes nothing."""
        parsed: dict[Key, MutationQuotaConfig] = {}
        for key, value in configs.items():
            if not (isinstance(key, tuple) and len(key) == 2 and all(p is None or isinstance(p, str) for p in key)
                    and key != (None, None)):
                raise ValueError(f"a mutation quota key must be (user, client_id), each a str, '{DEFAULT}' or None "
                                 f"(not both None); got {key!r}")
            parsed[key] = MutationQuotaConfig.of(value)
        with self._lock:
            self._configs = parsed
            for entry in list(self._quotas):
                if entry[0] in parsed:
                    self._quotas[entry].reconfigure(parsed[entry[0]])
                else:
                    del self._quotas[entry]

    def get(self, user: str, client_id: str) -> MutationQuota | None:
        """The quota that applies to (user, client_id) by Kafka's precedence; None = unlimited."""
        with self._lock:
            for u, c in ((user, client_id), (user, DEFAULT), (user, None), (DEFAULT, client_id), (DEFAULT, DEFAULT),
                         (DEFAULT, None), (None, client_id), (None, DEFAULT)):
                config = self._configs.get((u, c))
                if config is not None:
                    entity = (None if u is None else user, None if c is None else client_id)
                    quota = self._quotas.get(((u, c), entity))
                    if quota is None:
                        quota = MutationQuota(config.quota_per_s, config.window_s, config.samples, config.strict,
                                              self._clock)
                        self._quotas[((u, c), entity)] = quota
                    return quota
            return None

    def record(self, user: str, client_id: str, n: float = 1) -> float:
        quota = self.get(user, client_id)
        return 0.0 if quota is None else quota.record(n)

    def snapshot(self) -> list[dict[str, Any]]:
        """One row per live bucket: user, client_id ('' where the entry leaves it unnamed) and its metrics."""
        with self._lock:
            items = list(self._quotas.items())
        return [{"user": entity[0] or "", "client_id": entity[1] or "", **quota.snapshot()}
                for (_, entity), quota in items]


def call_with_mutation_quota(quota: MutationQuota | None, n: float, fn: Callable[[], T], timeout_s: float,
                             clock: Clock | None = None, sleep: Callable[[float], Any] | None = None) -> T:
    """Record n on ``quota`` (None: none here) and call ``fn``; on ThrottlingQuotaExceeded (from the quota or
    from ``fn`` itself, e.g. a remote quota) wait the throttle time and retry until ``timeout_s`` has passed.
    Re-raises the last ThrottlingQuotaExceeded when the next wait would run past the timeout."""
    at_least_zero("timeout_s", timeout_s, unit="seconds")
    clock = clock or SystemClock()
    sleep = sleep or clock.sleep
    deadline_ns = clock.now_ns() + int(timeout_s * NS_PER_S)
    while True:
        recorded = False
        try:
            if quota is not None:
                quota.record(n)
                recorded = True
            return fn()
        except ThrottlingQuotaExceeded as exc:
            if recorded:
                quota.record(-n)  # the mutation did not happen: give its tokens back
            if clock.now_ns() + int(exc.throttle_time_s * NS_PER_S) > deadline_ns:
                raise
            sleep(exc.throttle_time_s)

"""PublishRateLimiter: one level's msgs and bytes buckets, lazy throttling, a FIFO fairness queue (PIP-322).

How it works and why
--------------------
A producer sends first and is charged after (``handle_publish_throttling(producer, msgs, bytes)``): the send
consumes from the ``msgs`` bucket and the ``bytes`` bucket (either may be absent: unlimited). If either bucket is
left without tokens the producer is *throttled*: the limiter marks its reason on the producer's
``ThrottleTracker`` (which pauses it) and appends it to ``_queue``, the FIFO of throttled producers. Nothing
is refused: the send that crossed the limit went through, and its debt is repaid from later refills.

If no unthrottle task is scheduled, one is, after the longer of the two buckets' ``throttling_duration_s``.
The task (``_unthrottle``) unthrottles producers from the head of the queue while the buckets, read
consistently, hold tokens -- spending for each producer an estimate of its next send (the send that got it
throttled), so a single token does not wake ten producers at once. If producers remain it schedules itself again
after the time the buckets need to earn back what it just handed out (by that estimate) -- not "now", which
would wake the whole queue on tokens that the released producers are about to spend. At most one task is
scheduled at a time.

Fairness: a producer that is unthrottled and sends past the limit again joins the *back* of the queue, so under
saturation producers take turns in arrival order instead of the first-registered always winning (what Pulsar's
old limiter did). Every queue operation and the task's scheduling happen under ``_lock``, which the hot path
never takes: a producer cannot be left throttled with no task to wake it.

Live changes (``update_rate``): bucket rates and capacities change in place (no tokens lost or invented; see
bucket.py). A limit that is raised or removed unthrottles every queued producer at once; a lowered one re-plans the
task from the new throttling duration. A bucket holds one period of its limit (capacity = limit) unless
``update_rate(rate, burst_s=...)`` says how many seconds of the rate it may hold: a participant's static part of a
shared limit holds a hundredth of a second of it, since N participants' bursts add up (at least 1 token, never more
than one period). One that holds (below) holds a token more: it releases a producer at one token, and the hundredth
above it is room for what refills while the producer wakes up (the bucket's essay). A limiter that is one
participant's part of a shared limit -- a pool (``capacity``), or a static split (``hold_when_dry``) -- holds a
producer that comes while it has less than one token, before it sends (``hold_if_dry``): there, Pulsar's free first
send of a new producer would be one per Spark task, and N workers' would add up in the shared limit's window.

Worked example: rate 10 msgs/s, capacity 10, full. A producer sends 12 messages in one call: tokens -2, it is
throttled and queued, the task is scheduled after (1 - -2) / 10 = 0.3 s (target 1 token). At 0.3 s the bucket
holds 1 token; the estimate of its next send (12) exceeds that, but the head of the queue is always let go
when the bucket holds any token (else a send larger than the bucket would wait forever); it sends 12 again ->
-11, queued, next task after 1.2 s.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from .bucket import DEFAULT_RESOLUTION_S, AsyncTokenBucket
from .checks import positive
from .clock import NS_PER_S, Clock, Scheduler, SystemClock, TimerHandle, scheduler_for
from .counter import ExactCounter
from .policy import Level, Rate
from .throttle import ThrottleReason, ThrottleTracker

__all__ = ["PublishRateLimiter", "LimiterSnapshot", "BucketSnapshot", "QueueEntry", "REASON_BY_LEVEL", "RELEASE_TOKENS"]

REASON_BY_LEVEL = {
    Level.BROKER: ThrottleReason.BROKER_RATE,
    Level.RESOURCE_GROUP: ThrottleReason.RESOURCE_GROUP_RATE,
    Level.TENANT: ThrottleReason.TENANT_RATE,
    Level.NAMESPACE: ThrottleReason.NAMESPACE_RATE,
    Level.TOPIC: ThrottleReason.TOPIC_RATE,
}
# with no producer waiting, a limiter says the largest of the sends its last few waiting producers were queued with
# (``send_msgs``): a Spark task's last send is its rows' remainder, and the next task sends whole ones again
WAITED_REMEMBERED = 8
# a limiter that holds (``hold_if_dry``) holds a producer while it has less than this many tokens in a dimension, and
# releases its queue's head at this many: a whole message or byte (a new pool holds a hair of a token)
RELEASE_TOKENS = 1.0


class Throttleable(Protocol):
    name: str
    tracker: ThrottleTracker


@dataclass(frozen=True, slots=True)
class BucketSnapshot:
    dimension: str  # "msgs" | "bytes"
    tokens: float
    rate: float
    capacity: float
    period_s: float


@dataclass(frozen=True, slots=True)
class QueueEntry:
    producer: str
    waiting_s: float


@dataclass(frozen=True, slots=True)
class LimiterSnapshot:
    level: str
    name: str
    kind: str
    rate: Rate
    buckets: tuple[BucketSnapshot, ...]
    queue: tuple[QueueEntry, ...]
    throttled_count: int
    throttle_time_s: float
    admitted_msgs: float
    admitted_bytes: float
    extra: dict = field(default_factory=dict)


class _Dimension:
    """One of msgs/bytes: a bucket when limited, else just an exact counter of what was admitted."""

    __slots__ = ("name", "bucket", "counter", "admitted_before")

    def __init__(self, name: str):
        self.name = name
        self.bucket: AsyncTokenBucket | None = None
        self.counter = ExactCounter()
        self.admitted_before = 0.0  # admitted through buckets that were replaced or removed

    def admitted(self) -> float:
        through_bucket = self.bucket.consumed_total() if self.bucket else 0.0
        return self.admitted_before + self.counter.value() + through_bucket




def _ref(producer: Throttleable) -> Callable[[], Throttleable | None]:
    """A weak reference to ``producer`` (a strong one for an object that cannot be weakly referenced)."""
    try:
        return weakref.ref(producer)
    except TypeError:
        return lambda: producer

class PublishRateLimiter:
    """The publish limiter of one (level, name). See the module essay."""

    def __init__(
        self,
        rate: Rate | None = None,
        *,
        level: Level = Level.TOPIC,
        name: str = "",
        clock: Clock | None = None,
        scheduler: Scheduler | None = None,
        resolution_s: float = DEFAULT_RESOLUTION_S,
        kind: str = "publish",
    ):
        self.level = Level(level)
        self.name = name
        self.kind = kind
        self.reason = REASON_BY_LEVEL.get(self.level, ThrottleReason.TOPIC_RATE)
        self._clock = clock or SystemClock()
        self._scheduler = scheduler or scheduler_for(self._clock)
        self._resolution_s = resolution_s
        self._lock = threading.Lock()
        # (a reference to the producer, throttled since, its last send's msgs and bytes); weak: a task that ends
        # while its producer waits must not keep the producer -- and its claim on a shared pool -- alive
        self._queue: deque[tuple[Callable[[], Throttleable | None], int, float, float]] = deque()
        self._timer: TimerHandle | None = None
        self._throttled_count = 0
        # the messages of the sends the last WAITED_REMEMBERED producers throttled were queued with
        self._waited_msgs: deque[float] = deque(maxlen=WAITED_REMEMBERED)
        self._throttle_time_ns = 0
        self._msgs = _Dimension("msgs")
        self._bytes = _Dimension("bytes")
        self._rate = Rate.unlimited()
        self._burst_s: float | None = None
        self._capacity: tuple[float, float] | None = None
        self._holds = False     # ``hold_if_dry`` holds a producer that comes while it is dry
        self._msgs_bucket: AsyncTokenBucket | None = None
        self._bytes_bucket: AsyncTokenBucket | None = None
        self.on_throttle: Callable[[], None] | None = None   # told when a producer starts waiting (no lock held)
        self.update_rate(rate or Rate.unlimited())

    # --- the hot path -------------------------------------------------------------------------------------

    def handle_publish_throttling(self, producer: Throttleable, msgs: float = 1, bytes: float = 0) -> bool:
        """Charge a send that happened; True if it left this level over its limit (the producer is throttled)."""
        ok = True
        bucket = self._msgs_bucket
        if bucket is None:
            self._msgs.counter.add(msgs)
        else:
            ok = bucket.consume_and_check(msgs)
        bucket = self._bytes_bucket
        if bucket is None:
            self._bytes.counter.add(bytes)
        elif not bucket.consume_and_check(bytes):
            ok = False
        if ok:
            return False
        self._throttle(producer, msgs, bytes)
        return True

    def hold_if_dry(self, producer: Throttleable, msgs: float = 1, bytes: float = 0) -> bool:
        """Before a send: a limiter that holds (a pool -- a shared limit's granted tokens, see
        ``update_rate(capacity=...)`` -- or a static split told ``hold_when_dry``) and has less than one token
        throttles the producer now, without charging (True). Such a limiter is one participant's part of a limit
        shared by many: a send charged after the fact would be a debt its next tokens repay but the shared limit's
        window has already spent, and every producer of a new task would add one (a Spark worker starts a task
        every half second). A plain limiter returns False: Pulsar's rule (charge, then throttle) stands. Not the
        whole send either: a pool that paid first kept its stock idle until a grant topped it up to a send, which
        cost a stream 1-2 % of its limit, and one cut to 300 msgs/s with sends of 100 a third of it."""
        if not self._holds:
            return False
        for bucket in self._buckets():
            if bucket.tokens() < RELEASE_TOKENS:    # (dry: a new pool holds a hair of a token)
                self._throttle(producer, msgs, bytes)
                return True
        return False

    # --- throttling and the unthrottle task ---------------------------------------------------------------

    def _throttle(self, producer: Throttleable, msgs: float, bytes: float) -> None:
        with self._lock:
            producer.tracker.mark(self.reason)
            first = not self._queue
            self._queue.append((_ref(producer), self._clock.now_ns(), msgs, bytes))
            self._throttled_count += 1
            self._waited_msgs.append(msgs)
            if self._timer is None:
                self._timer = self._scheduler.call_later(self._throttling_duration_s(), self._unthrottle)
        hook = self.on_throttle
        if first and hook is not None:
            hook()

    def _throttling_duration_s(self) -> float:
        return max((b.throttling_duration_s() for b in self._buckets()), default=0.0)

    def _buckets(self) -> list[AsyncTokenBucket]:
        return [b for b in (self._msgs_bucket, self._bytes_bucket) if b is not None]

    def _unthrottle(self) -> None:
        with self._lock:
            self._timer = None
            msgs_left = self._msgs_bucket.tokens() if self._msgs_bucket else None
            bytes_left = self._bytes_bucket.tokens() if self._bytes_bucket else None
            # Release from the head while the buckets hold tokens, spending each producer's last send as an
            # estimate of its next one. The head always goes when there are any tokens, however large its send.
            # (one that holds releases on a whole token, as ``hold_if_dry`` holds below one: no spin on a hair)
            least = RELEASE_TOKENS if self._holds else 1e-12
            while self._queue and (msgs_left is None or msgs_left >= least) and (bytes_left is None
                                                                                or bytes_left >= least):
                ref, _, msgs, bytes = self._queue[0]
                self._release_head()
                if ref() is None:      # gone while it waited: it will not send
                    continue
                if msgs_left is not None:
                    msgs_left -= msgs
                if bytes_left is not None:
                    bytes_left -= bytes
            if self._queue and self._capacity is None:   # (a pool's next release comes with its next deposit)
                # wait until what was just spent (by estimate) has been earned back, not merely until now -- and one
                # that holds, left with a hair of a token (under ``least``), until its refill makes a whole one: a
                # positive hair reads "refilled", a timer due at once, and the release spun on the same hair
                delay = max(self._msgs_bucket.refill_time_s(min(msgs_left, 0.0)) if msgs_left is not None else 0.0,
                            self._bytes_bucket.refill_time_s(min(bytes_left, 0.0)) if bytes_left is not None else 0.0)
                self._timer = self._scheduler.call_later(delay, self._unthrottle)

    def _release_head(self) -> None:
        ref, since_ns, _, _ = self._queue.popleft()
        self._throttle_time_ns += max(0, self._clock.now_ns() - since_ns)
        producer = ref()
        if producer is not None:
            producer.tracker.unmark(self.reason)

    def _release_all(self) -> None:
        while self._queue:
            self._release_head()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # --- live changes -------------------------------------------------------------------------------------

    @property
    def rate(self) -> Rate:
        return self._rate

    @property
    def burst_s(self) -> float | None:
        return self._burst_s

    @property
    def capacity(self) -> tuple[float, float] | None:
        return self._capacity

    @property
    def holds_when_dry(self) -> bool:
        return self._holds

    def deposit(self, msgs: float = 0, bytes: float = 0) -> None:
        """Add granted tokens to the buckets (negative: take them back); waiting producers are released at
        once if the buckets now hold tokens. Not counted as admitted."""
        with self._lock:
            for bucket, n in ((self._msgs_bucket, msgs), (self._bytes_bucket, bytes)):
                if bucket is not None and n:
                    bucket.deposit(n)
            if self._queue and (msgs > 0 or bytes > 0):
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = self._scheduler.call_later(0.0, self._unthrottle)

    def charged_ns(self) -> int | None:
        """The clock's tick at its buckets' newest recorded charge (``AsyncTokenBucket.charged_ns``); None if none
        came. Not for the hot path."""
        return max((b.charged_ns for b in self._buckets() if b.charged_ns is not None), default=None)

    def balance(self) -> tuple[float | None, float | None]:
        """(msgs, bytes) tokens held now (None: that dimension is unlimited). Not for the hot path."""
        m, b = self._msgs_bucket, self._bytes_bucket
        return (None if m is None else m.tokens()), (None if b is None else b.tokens())

    def update_rate(self, rate: Rate, burst_s: float | None = None,
                    capacity: tuple[float, float] | None = None, *, hold_when_dry: bool = False) -> None:
        """Change the limit live. Raised or removed: every queued producer is unthrottled at once.
        ``burst_s``: the buckets hold that many seconds of the rate (None: one period, capacity = limit);
        ``capacity``: (msgs, bytes) the buckets hold instead, whatever the rate -- a pool filled by ``deposit``
        (a pool holds a producer that comes while it is dry, see ``hold_if_dry``); ``hold_when_dry``: so does
        this limiter, refilled by time (one participant's static part of a shared limit)."""
        if burst_s is not None:
            positive("burst_s", burst_s, unit="seconds", rule=", or None (one period)")
        with self._lock:
            old, self._rate = self._rate, rate
            self._burst_s = burst_s
            self._capacity = capacity
            self._holds = capacity is not None or bool(hold_when_dry)
            self._msgs_bucket = self._resize(self._msgs, rate.msgs, rate.period_s, capacity and capacity[0])
            self._bytes_bucket = self._resize(self._bytes, rate.bytes, rate.period_s, capacity and capacity[1])
            if rate.is_raise_of(old):
                self._release_all()
            elif self._queue:
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = self._scheduler.call_later(self._throttling_duration_s(), self._unthrottle)

    def _resize(self, dim: _Dimension, limit: float, period_s: float,
                pool: float | None = None) -> AsyncTokenBucket | None:
        bucket = dim.bucket
        if limit <= 0:  # unlimited: keep counting, drop the bucket
            if bucket is not None:
                dim.admitted_before += bucket.consumed_total()
            dim.bucket = None
            return None
        capacity = limit
        if pool:
            capacity = pool
        elif self._burst_s is not None and self._burst_s < period_s:
            room = limit * self._burst_s / period_s
            # at least a token; one that holds, the token it releases a producer at and the room above it
            capacity = min(limit, RELEASE_TOKENS + room) if self._holds else max(room, min(limit, 1.0))
        if bucket is None:
            dim.bucket = AsyncTokenBucket(rate=limit, capacity=capacity, period_s=period_s,
                                          initial_tokens=0 if pool else None,   # a pool holds only what is granted
                                          resolution_s=self._resolution_s, clock=self._clock)
        elif bucket.period_s != period_s:
            # a new period: carry the balance (and the debt) over, capped by the new capacity
            dim.admitted_before += bucket.consumed_total()
            dim.bucket = AsyncTokenBucket(rate=limit, capacity=capacity, initial_tokens=min(bucket.tokens(), capacity),
                                          period_s=period_s, resolution_s=self._resolution_s, clock=self._clock)
        elif bucket.rate != limit or bucket.capacity != capacity:
            if capacity > bucket.capacity:
                bucket.capacity = capacity
                bucket.rate = limit
            else:
                bucket.rate = limit
                bucket.capacity = capacity
        return dim.bucket

    def close(self) -> None:
        """Unthrottle everyone and cancel the task (the limiter is being removed)."""
        with self._lock:
            self._release_all()

    # --- inspection ---------------------------------------------------------------------------------------

    def admitted(self) -> tuple[float, float]:
        """(msgs, bytes) admitted so far (cumulative)."""
        return self._msgs.admitted(), self._bytes.admitted()

    def queue_length(self) -> int:
        return len(self._queue)

    def send_msgs(self) -> float:
        """The messages of the send its producers make next: the one its first waiting producer waits to make (the
        send it was refused since it was throttled, else the one that throttled it); with none waiting, the largest
        of the sends its last ``WAITED_REMEMBERED`` waiting producers were queued with -- a Spark task's producer
        sends as the last tasks' did, and a new task's first ask comes before its first refusal (0.0 before any
        producer was throttled). Not the last alone: a task's last send is the remainder of its rows (12 of sends of
        25), often the one that waited, and the next task's first sends are whole again. A producer gone while it
        waited (a task that ended) is passed over: it will not send."""
        for ref, since_ns, msgs, _ in list(self._queue):
            producer = ref()
            if producer is not None:
                waiting = getattr(producer, "waiting_send", None)
                asked = waiting(since_ns) if waiting is not None else None
                return msgs if asked is None else asked
        return max(self._waited_msgs, default=0.0)

    def snapshot(self) -> LimiterSnapshot:
        with self._lock:
            now = self._clock.now_ns()
            queue = tuple(QueueEntry(p.name, (now - since) / NS_PER_S)
                          for p, since in ((ref(), since) for ref, since, _, _ in self._queue) if p is not None)
            waiting_ns = sum(max(0, now - since) for _, since, _, _ in self._queue)
            buckets = tuple(
                BucketSnapshot(dim.name, dim.bucket.tokens(), dim.bucket.rate, dim.bucket.capacity, dim.bucket.period_s)
                for dim in (self._msgs, self._bytes) if dim.bucket is not None
            )
            return LimiterSnapshot(
                level=self.level.value, name=self.name, kind=self.kind, rate=self._rate, buckets=buckets,
                queue=queue, throttled_count=self._throttled_count,
                throttle_time_s=(self._throttle_time_ns + waiting_ns) / NS_PER_S,
                admitted_msgs=self._msgs.admitted(), admitted_bytes=self._bytes.admitted(),
            )

    def __repr__(self) -> str:
        return f"PublishRateLimiter({self.level.value}:{self.name!r}, {self._rate}, queued={len(self._queue)})"

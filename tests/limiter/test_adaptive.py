"""AdaptiveRate: the rules on a manual clock, and a simulated sink whose capacity the rate must find."""

from __future__ import annotations

import pytest

from limiter.adaptive import AdaptiveRate, Outcome


class Clock:
    """Seconds, advanced by hand."""

    def __init__(self) -> None:
        self.t = 100.0

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Timed:
    """An ``AdaptiveRate`` read and fed at ``clock``'s time (the tests' shorthand)."""

    def __init__(self, a: AdaptiveRate, clock: Clock):
        self.a, self.clock = a, clock

    def observe(self, outcome, n=1, **kw):
        return self.a.observe(outcome, n, self.clock.t, **kw)

    def rate_per_s(self) -> float:
        return self.a.rate_per_s(self.clock.t)

    def paused_for_s(self) -> float:
        return self.a.paused_for_s(self.clock.t)

    def snapshot(self):
        return self.a.snapshot(self.clock.t)

    def set_ceiling(self, *args, **kw):
        return self.a.set_ceiling(*args, **kw)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def rate(ceiling: float, clock: Clock, **kw) -> Timed:
    kw.setdefault("floor_per_s", 50.0)
    kw.setdefault("step_per_s", 20.0)
    return Timed(AdaptiveRate(ceiling, now_s=clock.t, **kw), clock)


def deliver(a: Timed, clock: Clock, per_s: float, seconds: float, tick_s: float = 0.01) -> None:
    """OK outcomes at ``per_s`` for ``seconds``."""
    for _ in range(round(seconds / tick_s)):
        clock.advance(tick_s)
        a.observe(Outcome.OK, per_s * tick_s)


@pytest.mark.parametrize("kw, says", [
    ({"ceiling_per_s": 0}, "ceiling_per_s"),
    ({"ceiling_per_s": 100, "floor_per_s": 200}, "floor_per_s (200) must be <= ceiling_per_s"),
    ({"ceiling_per_s": 100, "cut": 1.0}, "cut must be a number > 0 and < 1"),
    ({"ceiling_per_s": 100, "cut": 0.5, "max_cut": 0.9}, "max_cut (0.9) must be <= cut"),
    ({"ceiling_per_s": 100, "margin": -0.1}, "margin must be a number > 0 and < 1"),
    ({"ceiling_per_s": 100, "epoch_s": 0}, "epoch_s"),
    ({"ceiling_per_s": 100, "step_per_s": float("nan")}, "step_per_s"),
])
def test_bad_settings_say_what_is_allowed(kw: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        AdaptiveRate(**kw)


def test_bad_observations_are_refused_and_change_nothing(clock: Clock) -> None:
    a = rate(1000, clock)
    with pytest.raises(ValueError, match="outcome must be one of"):
        a.observe("429")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retry_after_s goes with a throttled outcome"):
        a.observe(Outcome.OK, retry_after_s=1.0)
    with pytest.raises(ValueError, match="retry_after_s"):
        a.observe(Outcome.THROTTLED, retry_after_s=-1)
    with pytest.raises(ValueError, match="n"):
        a.observe(Outcome.OK, 0)
    snap = a.snapshot()
    assert (snap.rate_per_s, snap.ok, snap.throttled, snap.changed_by) == (1000, 0, 0, "operator")


def test_the_worked_example_a_rate_far_above_the_sink_comes_down_to_what_it_delivers(clock: Clock) -> None:
    a = rate(2000, clock)                             # cut 0.97, max cut 0.5, margin 0.05 (the defaults)
    deliver(a, clock, 700, 1.0)                       # the sink delivered 700 in the last second
    a.observe(Outcome.THROTTLED)
    assert a.rate_per_s() == pytest.approx(1000)      # max(0.5 x 2,000, min(0.97 x 2,000, 0.95 x 700))
    assert a.snapshot().changed_by == "decrease"
    deliver(a, clock, 700, 1.0)
    a.observe(Outcome.THROTTLED)
    assert a.rate_per_s() == pytest.approx(665, rel=0.01)   # 0.95 x 700
    assert a.snapshot().throttled == 2


def test_the_429s_of_one_event_cut_once(clock: Clock) -> None:
    a = rate(1000, clock)
    deliver(a, clock, 1000, 1.0)
    for _ in range(50):                               # every worker's sends in flight answer 429
        clock.advance(0.01)
        a.observe(Outcome.THROTTLED)
    assert a.rate_per_s() == pytest.approx(950, rel=0.01)   # one cut (the sink delivered 1,000, less 0.05)
    clock.advance(0.6)                                # the event's hold is over
    a.observe(Outcome.THROTTLED)
    assert a.rate_per_s() < 930


def test_a_clean_used_rate_climbs_gently_where_the_sink_refused_then_doubling(clock: Clock) -> None:
    a = rate(1000, clock)
    deliver(a, clock, 600, 1.0)
    a.observe(Outcome.THROTTLED)
    start = a.rate_per_s()
    assert start == pytest.approx(570, rel=0.01)      # 0.95 x 600
    seen = []
    for _ in range(9):
        deliver(a, clock, a.rate_per_s(), 1.0)
        seen.append(a.rate_per_s())
    # +20 a second up to the 600 the sink refused at (570, 590, 610); past it the step doubles: 20, 40, 80, 160;
    # then the ceiling
    steps = [round(b - s) for s, b in zip([start, *seen[:-1]], seen, strict=True)]
    assert steps == [20, 20, 20, 40, 80, 160, 90, 0, 0], steps
    assert a.rate_per_s() == 1000 and a.snapshot().changed_by == "increase"


def test_a_rate_the_job_does_not_use_does_not_climb(clock: Clock) -> None:
    a = rate(1000, clock)
    deliver(a, clock, 400, 1.0)
    a.observe(Outcome.THROTTLED)
    cut = a.rate_per_s()
    deliver(a, clock, 0.5 * cut, 10.0)                # clean, but the job sent half of it: nothing learned
    assert a.rate_per_s() == pytest.approx(cut)


def test_errors_are_counted_and_are_no_congestion(clock: Clock) -> None:
    a = rate(1000, clock)
    deliver(a, clock, 1000, 1.0)
    a.observe(Outcome.ERROR, 5)
    assert a.rate_per_s() == 1000 and a.snapshot().errors == 5


def test_a_slow_answer_is_congestion_when_a_latency_bound_is_set(clock: Clock) -> None:
    a = rate(1000, clock, slow_s=0.2)
    deliver(a, clock, 1000, 1.0)
    a.observe(Outcome.OK, latency_s=0.1)
    assert a.rate_per_s() == 1000
    a.observe(Outcome.OK, latency_s=0.5)
    assert a.rate_per_s() == pytest.approx(950, rel=0.01)
    b = rate(1000, clock)                             # no bound: latency alone says nothing
    b.observe(Outcome.OK, latency_s=5.0)
    assert b.rate_per_s() == 1000


def test_retry_after_pauses_every_sender_up_to_the_longest_pause_allowed(clock: Clock) -> None:
    a = rate(1000, clock, max_pause_s=10.0)
    deliver(a, clock, 1000, 1.0)
    a.observe(Outcome.THROTTLED, retry_after_s=2.0)
    assert a.rate_per_s() == 0.0 and a.paused_for_s() == pytest.approx(2.0)
    assert a.snapshot().changed_by == "retry-after"
    clock.advance(2.0)
    assert a.rate_per_s() == pytest.approx(950, rel=0.01)   # back, at the cut rate
    a.observe(Outcome.THROTTLED, retry_after_s=3600)  # a bogus header: 10 s, not an hour
    assert a.paused_for_s() == pytest.approx(10.0)


def test_a_pause_is_left_out_of_what_the_sink_delivered(clock: Clock) -> None:
    """The sink was not asked while every sender honoured its Retry-After: what it delivered a second is what it
    delivered while asked."""
    a = rate(2000, clock)
    deliver(a, clock, 700, 1.0)
    a.observe(Outcome.THROTTLED, retry_after_s=1.0)   # -> 1,000 (the deepest cut), and a pause of 1 s
    clock.advance(1.0)                                # the pause: nothing sent, nothing delivered
    assert a.rate_per_s() == pytest.approx(1000)
    deliver(a, clock, 700, 0.5)                       # back at 1,000: the sink takes its 700 a second
    a.observe(Outcome.THROTTLED, retry_after_s=1.0)
    clock.advance(1.0)
    # 0.95 x 700 -- counting the pause, the sink read as 350 in 1.5 s (233/s) and the cut went to 500
    assert a.rate_per_s() == pytest.approx(665, rel=0.01)


def test_the_operators_change_wins_at_once(clock: Clock) -> None:
    a = rate(2000, clock)
    deliver(a, clock, 700, 1.0)
    a.observe(Outcome.THROTTLED)
    assert a.rate_per_s() < 2000
    a.set_ceiling(300)                                # a cut for maintenance: now
    assert a.rate_per_s() == 300 and a.snapshot().changed_by == "operator"
    with pytest.raises(ValueError, match="floor_per_s"):
        a.set_ceiling(40)                             # below the floor of 50: refused, nothing changed
    assert a.snapshot().ceiling_per_s == 300
    a.set_ceiling(40, floor_per_s=10)
    assert (a.rate_per_s(), a.snapshot().floor_per_s) == (40, 10)


def test_the_floor_holds_however_hard_the_sink_refuses(clock: Clock) -> None:
    a = rate(1000, clock, floor_per_s=100)
    for _ in range(20):
        clock.advance(1.1)
        a.observe(Outcome.THROTTLED)                  # nothing delivered at all
    assert a.rate_per_s() == 100


class Sink:
    """A server that takes ``capacity_per_s`` (a token bucket holding a tenth of a second) and answers 429 with
    a Retry-After of 0 beyond it."""

    def __init__(self, capacity_per_s: float):
        self.capacity_per_s, self.tokens, self.ok, self.rejected = capacity_per_s, capacity_per_s / 10, 0.0, 0.0

    def tick(self, dt_s: float, sends: float) -> tuple[float, float]:
        self.tokens = min(self.capacity_per_s / 10, self.tokens + self.capacity_per_s * dt_s)
        ok = min(sends, max(0.0, self.tokens))
        self.tokens -= ok
        self.ok, self.rejected = self.ok + ok, self.rejected + sends - ok
        return ok, sends - ok


def run(a: Timed, sink: Sink, clock: Clock, seconds: float, tick_s: float = 0.01) -> list[float]:
    """A job with more demand than any rate sends at ``a``'s rate; returns the sink's OK per second."""
    per_second, done = [], 0.0
    for i in range(round(seconds / tick_s)):
        clock.advance(tick_s)
        ok, refused = sink.tick(tick_s, a.rate_per_s() * tick_s)
        if ok:
            a.observe(Outcome.OK, ok)
        if refused:
            a.observe(Outcome.THROTTLED, refused, retry_after_s=0)
        done += ok
        if (i + 1) % round(1 / tick_s) == 0:
            per_second.append(done)
            done = 0.0
    return per_second


def test_a_sink_of_unknown_capacity_is_found_and_followed(clock: Clock) -> None:
    a = rate(2000, clock)
    sink = Sink(700)
    first = run(a, sink, clock, 10)
    assert min(first[-3:]) >= 0.9 * 700, first                  # found within 10 s
    ok, rejected = sink.ok, sink.rejected
    steady = run(a, sink, clock, 30)
    assert sum(steady) / len(steady) >= 0.95 * 700, steady
    assert (sink.rejected - rejected) / (sink.ok - ok + sink.rejected - rejected) < 0.01
    sink.capacity_per_s = 1200                                  # it grew: followed within 10 s
    grown = run(a, sink, clock, 10)
    assert min(grown[-3:]) >= 0.9 * 1200, grown
    sink.capacity_per_s = 400                                   # and shrank
    shrunk = run(a, sink, clock, 10)
    assert min(shrunk[-3:]) >= 0.9 * 400 and a.rate_per_s() <= 1.1 * 400, (shrunk, a.rate_per_s())

"""A scrape rendered a piece at a time on the event loop (``metrics.exposition``, ``collect_steps``,
``controlplane.scrapes``): the same bytes as the client library renders the registry, the loop free between
pieces, and a costly render handed out again while rendering anew would take more than its share of a core."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from controlplane.renders import FORGET_AFTER_S, FRESH_BELOW_CPU_S, SEND_BYTES
from controlplane.scrapes import Scrapes
from metrics.collector import STEP_ENTRIES
from metrics.exposition import pieces
from protocol import PolicySet, ResourceGroup

from .conftest import Env, bucket, counters, report

pytestmark = pytest.mark.unit
PARTICIPANTS, LIMITS = 12, 250   # 3,000 limiters' series a family: several pieces each, many pauses


def busy_env(make_env) -> Env:
    env: Env = make_env()
    for p in range(PARTICIPANTS):
        # names with the characters the format escapes, and a participant's counters that reset
        names = [f'acme/web/t{i}"\\q' for i in range(LIMITS)]
        env.send(report(env, f"w{p}", 1, counters=[counters(name=n, throttled=p + i, msgs=0.5 * i)
                                                   for i, n in enumerate(names)],
                        buckets=[bucket(name=n, tokens=-p) for n in names]))
    env.collector.observe_report_latency(0.02)
    return env


class _Registry:
    def __init__(self, *families) -> None:
        self.families = families

    def collect(self):
        return list(self.families)


def test_a_family_in_pieces_is_the_library_text_byte_for_byte() -> None:
    gauge = GaugeMetricFamily("x_level", 'help with \\ and\nnewline', labels=["name"])
    for i in range(1203):
        gauge.add_metric([f'n{i}"\\\n'], i / 7)
    counter = CounterMetricFamily("x_events", "counted", labels=["name"])
    for i in range(10):
        counter.add_metric([f"n{i}"], i)
    histogram = HistogramMetricFamily("x_wait_seconds", "waits", labels=[])
    histogram.add_metric([], [("0.1", 1), ("+Inf", 3)], 0.5)
    for family in (gauge, counter, histogram):
        got = list(pieces(family, per_piece=100))
        assert b"".join(got) == generate_latest(_Registry(family))
    assert len(list(pieces(gauge, per_piece=100))) == 13
    assert sum(piece.count(b"# TYPE") for piece in pieces(gauge, per_piece=100)) == 1


def test_a_family_with_samples_the_library_moves_is_rendered_whole() -> None:
    counter = CounterMetricFamily("x_done", "done", labels=["name"], created=None)
    for i in range(30):
        counter.add_metric([f"n{i}"], i, created=1000.0 + i)   # _created samples go after the others
    got = list(pieces(counter, per_piece=7))
    assert len(got) == 1 and got[0] == generate_latest(_Registry(counter))


def test_collect_steps_pauses_and_yields_collects_families(make_env) -> None:
    env = busy_env(make_env)
    steps = list(env.collector.collect_steps())
    pauses = sum(step is None for step in steps)
    entries = PARTICIPANTS * LIMITS * 2
    assert pauses >= entries // STEP_ENTRIES   # (and more, within the big families)
    families = [step for step in steps if step is not None]
    assert [f.name for f in families] == [f.name for f in env.collector.collect()]
    assert [f.samples for f in families] == [f.samples for f in env.collector.collect()]


def test_the_resource_groups_usage_is_gathered_a_report_at_a_time_with_pauses_between(make_env) -> None:
    # participants whose reports carry nothing but the usage of many resource groups: gathered in one step after
    # the reports, that step held the event loop for every participant's every key at once
    groups = {f"rg{i}": ResourceGroup(publishRateInMsgs=1000) for i in range(LIMITS)}
    env: Env = make_env(policies=PolicySet(version=2, resourceGroups=groups))
    for p in range(PARTICIPANTS):
        env.send(report(env, f"w{p}", 1, usage=[{"level": "resource_group", "name": name, "direction": "publish",
                                                 "usage_msgs_per_s": p + 1.0} for name in groups]))
    steps = list(env.collector.collect_steps())
    first_family = next(i for i, step in enumerate(steps) if step is not None)
    assert first_family >= PARTICIPANTS * LIMITS // STEP_ENTRIES   # the pauses come while the usage is read
    everyone = PARTICIPANTS * (PARTICIPANTS + 1) / 2
    assert env.value("throttlescope_resource_group_usage", resource_group="rg7", monitoring_class="publish",
                     dimension="msgs") == everyone


def test_the_endpoint_text_is_the_registry_text_and_the_loop_runs_between_pieces(make_env) -> None:
    env = busy_env(make_env)

    async def scrape_while_counting() -> tuple[bytes, int, int]:
        ticks, done = 0, asyncio.Event()

        async def other_work() -> None:   # what a report's handling is to the loop: it gets turns, or it does not
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        worker = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        chunks = [chunk async for chunk in await Scrapes(env.collector).text()]
        done.set()
        await worker
        return b"".join(chunks), ticks, len(chunks)

    text, ticks, chunks = asyncio.run(scrape_while_counting())
    assert text == generate_latest(env.registry)
    assert b'name="acme/web/t7\\"\\\\q"' in text
    assert chunks > 20
    assert ticks > chunks   # the other task ran between every piece, and in the collector's pauses too


def scrape(scrapes: Scrapes) -> tuple[bytes, int]:
    async def read() -> list[bytes]:
        return [chunk async for chunk in await scrapes.text()]
    chunks = asyncio.run(read())
    return b"".join(chunks), len(chunks)


class CpuClock:
    """The renders' CPU clock: each reading ``step_s`` on from the last (a render of n steps: about n x step_s)."""

    def __init__(self, step_s: float) -> None:
        self.now_s, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.now_s += self.step_s
        return self.now_s


def test_a_costly_render_is_handed_out_again_until_rendering_anew_keeps_to_the_share(make_env) -> None:
    env = busy_env(make_env)
    now = [100.0]
    scrapes = Scrapes(env.collector, share=0.1, clock=lambda: now[0], cpu_clock=CpuClock(0.001))
    first, _ = scrape(scrapes)
    cost_s = scrapes.latest.cpu_s
    assert cost_s >= FRESH_BELOW_CPU_S and scrapes.latest.started_s == 100.0 and scrapes.latest.text == first
    env.advance(1.0)
    env.send(report(env, "w0", 2, counters=[counters(name="acme/web/new", throttled=1)]))
    now[0] += 0.9 * cost_s / 0.1
    again, chunks = scrape(scrapes)
    assert again == first and chunks <= -(-len(first) // SEND_BYTES)   # as it was, in chunks of whole pieces
    assert scrapes.latest.started_s == 100.0
    now[0] = 100.0 + 1.01 * cost_s / 0.1
    fresh, _ = scrape(scrapes)
    assert fresh != first and b'name="acme/web/new"' in fresh and fresh == generate_latest(env.registry)
    assert scrapes.latest.started_s == now[0]


def test_a_cheap_render_is_never_reused(make_env) -> None:
    env: Env = make_env()
    env.send(report(env, "w0", 1, counters=[counters(throttled=1)]))
    scrapes = Scrapes(env.collector, share=0.1, clock=lambda: 100.0, cpu_clock=CpuClock(0.0001))
    first, _ = scrape(scrapes)
    assert scrapes.latest.cpu_s < FRESH_BELOW_CPU_S
    env.advance(1.0)
    env.send(report(env, "w0", 2, counters=[counters(throttled=5)]))
    second, _ = scrape(scrapes)
    assert second != first and second == generate_latest(env.registry)


@pytest.mark.parametrize("share", [0, -0.1, 1.5])
def test_a_share_outside_a_core_is_refused(make_env, share: float) -> None:
    with pytest.raises(ValueError, match="share must be a fraction of a core > 0 and <= 1"):
        Scrapes(make_env().collector, share=share)


def test_what_a_scrape_cost_is_told_after_its_text_was_dropped_for_want_of_scrapers(make_env) -> None:
    env = busy_env(make_env)
    now = [100.0]
    scrapes = Scrapes(env.collector, share=0.1, clock=lambda: now[0], cpu_clock=CpuClock(0.001))
    assert scrapes.latest_cpu_s is None   # before the first
    scrape(scrapes)
    cost_s = scrapes.latest.cpu_s
    assert scrapes.latest_cpu_s == cost_s > 0
    now[0] += FORGET_AFTER_S + 1   # nobody scraped for a minute; another read drops the kept text
    asyncio.run(scrapes.answer("another view", lambda: iter([b"x"])))
    assert scrapes.latest is None and scrapes.latest_cpu_s == cost_s


def test_a_kept_render_goes_out_again_in_chunks_of_whole_pieces_of_about_send_bytes() -> None:
    from controlplane.renders import _resend

    pieces = tuple(bytes([65 + i]) * (SEND_BYTES // 3 + 1) for i in range(5))

    async def read() -> list[bytes]:
        return [chunk async for chunk in _resend(pieces)]

    chunks = asyncio.run(read())
    assert b"".join(chunks) == b"".join(pieces) and [len(c) for c in chunks] == [3 * len(pieces[0]), 2 * len(pieces[0])]


def test_a_familys_values_are_let_go_series_by_series_as_the_scrape_reads_them() -> None:
    """Freed all at once at the scrape's end, millions of floats held the loop 100-210 ms."""
    import weakref

    from metrics.collector import _Values

    class Value(float):   # (a float a weak reference can follow)
        pass

    values, kept = _Values(), []
    for i in range(3 * STEP_ENTRIES):
        v = Value(i)
        kept.append(weakref.ref(v))
        values.extend("throttlescope_throttled", ("topic", "publish", f"t{i:05d}"), [v])
        del v
    steps = values.family_steps("throttlescope_throttled")
    assert next(steps) is None   # a pause after the first STEP_ENTRIES series
    alive = [ref() is not None for ref in kept]
    assert not any(alive[:STEP_ENTRIES - 1]) and all(alive[STEP_ENTRIES + 1:])
    *_, family = steps
    assert len(family.samples) == 3 * STEP_ENTRIES and "throttlescope_throttled" not in values.by

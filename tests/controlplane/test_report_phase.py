"""Each participant's place in the interval: the golden-ratio phases, the slots, and the time an answer tells."""

from __future__ import annotations

import random

import pytest

from controlplane.report_phase import EARLIEST, ReportSlots, next_report_in_s
from controlplane.state import LiveState

from .fake_clock import FakeClock, report_at

pytestmark = pytest.mark.unit


def test_the_worked_example_of_the_essay() -> None:
    assert next_report_in_s(1, 30.0, 3_000_000.0) == pytest.approx(18.54, abs=0.005)
    assert next_report_in_s(1, 30.0, 3_000_018.60) == pytest.approx(29.94, abs=0.005)
    assert next_report_in_s(0, 30.0, 3_000_000.0) == pytest.approx(30.0)   # (at its phase now: one interval on)


def test_the_time_told_is_a_half_to_one_and_a_half_intervals_and_lands_on_the_slots_phase() -> None:
    rng = random.Random(7)
    for _ in range(2_000):
        slot, interval_s, now_s = rng.randrange(5_000), rng.choice((1.0, 3.0, 30.0)), rng.uniform(0, 2e9)
        in_s = next_report_in_s(slot, interval_s, now_s)
        assert EARLIEST * interval_s - 1e-6 <= in_s < (1 + EARLIEST) * interval_s + 1e-6
        phase = ((now_s + in_s) % interval_s) / interval_s
        expected = (slot * 0.6180339887498949) % 1.0
        assert min(abs(phase - expected), 1 - abs(phase - expected)) < 1e-4


@pytest.mark.parametrize("n", [2, 3, 10, 99, 100, 101, 1_000, 5_000])
def test_the_phases_of_n_slots_are_spread_evenly_whatever_n(n: int) -> None:
    phases = sorted((next_report_in_s(k, 1.0, 0.0) % 1.0) for k in range(n))
    gaps = [b - a for a, b in zip(phases, phases[1:] + [phases[0] + 1.0], strict=True)]
    assert min(gaps) * n >= 0.45 and max(gaps) * n <= 1.46   # (of an even spacing: the essay's figures)
    assert max(gaps) / min(gaps) < 2.62


def test_slots_are_the_least_free_ones_and_come_back_when_their_participant_goes() -> None:
    slots = ReportSlots()
    assert [slots.take(p) for p in "abc"] == [0, 1, 2] and slots.take("b") == 1
    slots.free("a")
    slots.free("b")
    slots.free("nobody")
    assert slots.take("d") == 0 and slots.take("e") == 1 and slots.take("f") == 3 and len(slots) == 4
    assert slots.get("a") is None and slots.get("f") == 3


def test_live_participants_hold_a_slot_from_their_first_accepted_report_until_they_are_removed() -> None:
    clock = FakeClock(3_000_000.0)
    live = LiveState(1.0, clock)
    assert live.next_report_in_s("a", 30.0) is None   # (not live: no place to tell)
    live.ingest(report_at(clock, pid="a"))
    live.ingest(report_at(clock, pid="b"))
    assert live.next_report_in_s("a", 30.0) == pytest.approx(30.0)
    assert live.next_report_in_s("b", 30.0) == pytest.approx(18.54, abs=0.005)
    live.goodbye("a")
    clock.t += 1.5
    live.ingest(report_at(clock, pid="b", seq=2))
    live.ingest(report_at(clock, pid="c"))   # a's slot, freed by its goodbye
    assert live.next_report_in_s("c", 30.0) == pytest.approx(28.5)
    clock.t += 2.5   # b and c expire (silent for more than 2 intervals): both slots free again
    live.ingest(report_at(clock, pid="d", seq=1))
    assert live.next_report_in_s("d", 1.0) == pytest.approx(1.0)

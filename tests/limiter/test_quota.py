"""limiter.quota: PIP-82 local quotas (proportional and max-min fair), report suppression."""

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter.policy import PolicyError
from limiter.quota import (
    DEFAULT_STRATEGY,
    DEFAULT_TOLERANCE_PCT,
    UNLIMITED,
    Strategy,
    allocate_fair,
    compute_local_quota,
    local_quotas,
    need_to_report,
)

pytestmark = pytest.mark.unit

approx = pytest.approx


# ---------------------------------------------------------------- compute_local_quota (proportional)

@pytest.mark.parametrize("configured", [-1, -5, 0, -1.0])
def test_proportional_unlimited_stays_unlimited(configured):
    assert compute_local_quota(configured, 10, [10, 20]) == UNLIMITED == -1


def test_proportional_total_zero_gives_configured():
    assert compute_local_quota(100, 0, [0, 0, 0]) == 100


def test_proportional_pip82_example_and_reduction():
    usages = {"b1": 10, "b2": 50, "b3": 30}
    quotas = [compute_local_quota(100, u, usages) for u in usages.values()]
    assert quotas == approx([100 / 9, 500 / 9, 300 / 9])
    assert sum(quotas) == approx(100)
    # over the limit: each shrinks by its fraction
    assert [compute_local_quota(100, u, [80, 40]) for u in (80, 40)] == approx([200 / 3, 100 / 3])


def test_proportional_floor_is_one_but_never_above_configured():
    assert compute_local_quota(100, 0, [0, 50]) == 1
    assert compute_local_quota(100, 0.1, [0.1, 1000]) == 1
    assert compute_local_quota(0.5, 0, [0, 10]) == 0.5


@pytest.mark.parametrize("configured, my, all_usages, match", [
    (100, -1, [-1, 5], "my_usage must be a finite number >= 0"),
    (100, 5, [5, -2], "every usage in all_usages must be a finite number >= 0"),
    (100, math.nan, [1], "my_usage"),
    (100, 5, [5, math.inf], "every usage"),
    (100, True, [True], "my_usage"),
    (100, 25, [10, 10], "my_usage \\(25\\) is part of the total, so it must be <= sum\\(all_usages\\) \\(20"),
    (100, 5, [], "must be <= sum"),
])
def test_proportional_rejects_bad_usage(configured, my, all_usages, match):
    with pytest.raises(ValueError, match=match):
        compute_local_quota(configured, my, all_usages)


# Pulsar's own cases (ResourceQuotaCalculatorImplTest): ResourceGroupService passes the *global total* as a
# one-element array, mine being part of it. Pulsar truncates to a long; we keep the fraction.
def test_pulsar_calculator_cases_with_the_global_total_as_one_element():
    assert compute_local_quota(-1, 0, [0]) == UNLIMITED                   # testRQCalcNegativeConfTest
    with pytest.raises(ValueError, match="my_usage"):
        compute_local_quota(0, -1, [0])                                     # testRQCalcNegativeLocalUsageTest
    with pytest.raises(ValueError, match="every usage"):
        compute_local_quota(0, 0, [-1])                                     # testRQCalcNegativeAllUsageTest
    assert compute_local_quota(100, 20, [40]) == 50 > 20                  # testRQCalcGlobUsedLessThanConfigTest
    assert compute_local_quota(100, 20, [100]) == 20                      # testRQCalcGlobUsedEqualsToConfigTest
    assert 20 > compute_local_quota(100, 20, [150]) == approx(40 / 3)     # testRQCalcGlobUsedGreaterThanConfigTest
    q1, q2 = compute_local_quota(100, 20, [60]), compute_local_quota(100, 40, [60])
    assert q1 / q2 == approx(20 / 40) and (q1, q2) == approx((100 / 3, 200 / 3))  # ...ProportionalIncrementTest
    assert compute_local_quota(10, 0, [0]) == 10                          # testRQCalcGlobUsedZeroTest


def test_the_total_and_the_list_of_usages_give_the_same_quota():
    usages = {"b1": 10, "b2": 50, "b3": 30}
    for mine in usages.values():
        assert compute_local_quota(100, mine, [sum(usages.values())]) == compute_local_quota(100, mine, usages)
    assert compute_local_quota(100, 90, [90]) == 100                       # alone: the whole quota


@pytest.mark.parametrize("configured", [math.nan, math.inf, -math.inf, "100", None])
def test_proportional_rejects_bad_configured(configured):
    with pytest.raises(PolicyError, match="configured must be a finite number"):
        compute_local_quota(configured, 1, [1])


usage_lists = st.lists(st.floats(0, 1e9, allow_nan=False), min_size=1, max_size=10)


@given(usages=usage_lists, configured=st.floats(1e-3, 1e9))
def test_property_mine_is_always_within_the_total_of_a_list_holding_it(usages, configured):
    for u in usages:    # fsum rounds the exact sum, which is >= u, to nearest: never below u
        assert compute_local_quota(configured, u, usages) == compute_local_quota(configured, u, [math.fsum(usages)])


@given(usages=usage_lists, configured=st.floats(-1e6, 0))
def test_property_proportional_unlimited_stays_unlimited(usages, configured):
    assert all(compute_local_quota(configured, u, usages) == UNLIMITED for u in usages)


@given(usages=usage_lists, configured=st.floats(1e-3, 1e9))
def test_property_proportional_sum(usages, configured):
    # What the formula guarantees: quota_i = max(configured * u_i / total, floor). So the sum is exactly
    # `configured` when no participant is lifted to the floor, and otherwise at most n floors above it.
    # With total usage 0 everyone gets `configured` (the n-fold start-up transient).
    quotas = [compute_local_quota(configured, u, usages) for u in usages]
    total, floor = math.fsum(usages), min(1.0, configured)
    if total == 0:
        assert quotas == [configured] * len(usages)
        return
    exact_total = sum(map(Fraction, usages))
    shares = [float(Fraction(configured) * Fraction(u) / exact_total) for u in usages]
    assert quotas == approx([max(s, floor) for s in shares], rel=1e-9)
    if all(s >= floor for s in shares):
        assert math.fsum(quotas) == approx(configured, rel=1e-9)
    assert configured * (1 - 1e-9) <= math.fsum(quotas) <= configured * (1 + 1e-9) + floor * len(usages)


# ---------------------------------------------------------------- allocate_fair (max-min, water-filling)

def test_fair_three_way_water_filling():
    assert allocate_fair(100, {"a": 10, "b": 50, "c": 80}) == {"a": 10, "b": 45, "c": 45}


def test_fair_spare_is_shared_equally_on_top_of_demand():
    quotas = allocate_fair(100, {"a": 10, "b": 20, "c": 30})
    assert list(quotas.values()) == approx([10 + 40 / 3, 20 + 40 / 3, 30 + 40 / 3])
    assert sum(quotas.values()) <= 100


def test_fair_min_share_keeps_idle_participants_above_zero():
    quotas = allocate_fair(100, {"idle": 0, "busy": 500})
    assert quotas == {"idle": 1, "busy": 99}
    assert allocate_fair(100, {"idle": 0, "busy": 500}, min_share=10) == {"idle": 10, "busy": 90}
    # capacity below n * min_share: an equal split of the capacity
    assert allocate_fair(2, {p: 5 for p in "abcd"}, min_share=1) == {p: 0.5 for p in "abcd"}


def test_fair_unlimited_and_empty():
    assert allocate_fair(-1, {"a": 5, "b": 0}) == {"a": UNLIMITED, "b": UNLIMITED}
    assert allocate_fair(0, {"a": 5}) == {"a": UNLIMITED}
    assert allocate_fair(100, {}) == {}


def test_fair_keeps_input_order_and_is_deterministic():
    demands = {"z": 80, "a": 10, "m": 50}
    first = allocate_fair(100, demands)
    assert list(first) == ["z", "a", "m"]
    assert all(allocate_fair(100, demands) == first for _ in range(3))


@pytest.mark.parametrize("capacity, demands", [
    (6.9, {i: 6.9 for i in range(6)}),        # a level of 6.9 / 6 would sum to 6.9000000000000004
    (3.768, {0: 0.16, 1: 2.65, 2: 3.7, 3: 2.24, 4: 1.48, 5: 0.64}),
    (7.88, {0: 4.64, 1: 1.22}),               # demand + spare share would sum to 7.880000000000001
])
def test_fair_float_rounding_never_exceeds_capacity(capacity, demands):
    quotas = list(allocate_fair(capacity, demands).values())
    for order in (quotas, sorted(quotas), sorted(quotas, reverse=True)):   # exact in any order
        assert sum(order) <= capacity
    assert math.fsum(quotas) == approx(capacity, rel=1e-12)


def test_fair_rounding_case_really_rounds_over():
    # the preconditions that make the test above meaningful
    assert sum([6.9 / 6] * 6) > 6.9
    spare = (7.88 - (4.64 + 1.22)) / 2
    assert math.fsum([4.64 + spare, 1.22 + spare]) > 7.88


@pytest.mark.parametrize("capacity, demands, min_share, error, match", [
    (100, {"a": -1}, 1, ValueError, "demand of participant 'a' must be a finite number >= 0"),
    (100, {"a": math.nan}, 1, ValueError, "demand of participant 'a'"),
    (100, {"a": math.inf}, 1, ValueError, "demand of participant 'a'"),
    (100, [("a", 1)], 1, TypeError, "demands must be a mapping"),
    (100, {"a": 1}, 0, ValueError, "min_share must be a finite number > 0"),
    (math.nan, {"a": 1}, 1, PolicyError, "capacity must be a finite number"),
])
def test_fair_rejects_bad_input(capacity, demands, min_share, error, match):
    with pytest.raises(error, match=match):
        allocate_fair(capacity, demands, min_share)


demand_maps = st.dictionaries(st.integers(0, 100), st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=12)
capacities = st.floats(1e-3, 1e7)
min_shares = st.floats(1e-3, 1e3)


@settings(max_examples=300)
@given(capacity=capacities, demands=demand_maps, min_share=min_shares)
def test_property_fair_is_max_min_fair(capacity, demands, min_share):
    quotas = allocate_fair(capacity, demands, min_share)
    tol = 1e-9 * capacity
    floor = min(min_share, capacity / len(demands))
    # the total never exceeds the capacity (exactly, in any order of summing), and uses all of it
    values = list(quotas.values())
    assert all(sum(order) <= capacity for order in (values, sorted(values), sorted(values, reverse=True)))
    assert math.fsum(quotas.values()) >= capacity - tol
    assert all(q > 0 and q >= floor - tol for q in quotas.values())
    short = [p for p in demands if quotas[p] < demands[p] - tol]
    for p in demands:
        want = max(demands[p], floor)
        if short:
            # nobody gets more than it wants while another gets less than it wants ...
            assert quotas[p] <= want + tol
            # ... and a participant that is short gets at least as much as anyone (the max-min property)
            assert all(quotas[p] <= quotas[s] + tol for s in short)
        else:
            assert quotas[p] >= want - tol


@given(c1=capacities, c2=capacities, demands=demand_maps, min_share=min_shares)
def test_property_fair_is_monotone_in_capacity(c1, c2, demands, min_share):
    low, high = sorted((c1, c2))
    a, b = allocate_fair(low, demands, min_share), allocate_fair(high, demands, min_share)
    assert all(a[p] <= b[p] + 1e-9 * high for p in demands)


@given(capacity=capacities, demand=st.floats(0, 1e6), n=st.integers(1, 20), min_share=min_shares)
def test_property_fair_symmetric_demands_get_equal_shares(capacity, demand, n, min_share):
    quotas = allocate_fair(capacity, dict.fromkeys(range(n), demand), min_share)
    assert len(set(quotas.values())) == 1
    assert quotas[0] == approx(capacity / n, rel=1e-9)


# ---------------------------------------------------------------- need_to_report (PIP-82 report suppression)

def test_report_default_tolerance_is_five_percent():
    assert DEFAULT_TOLERANCE_PCT == 5
    assert not need_to_report(104, 100, 0, 0)
    assert not need_to_report(105, 100, 0, 0)       # exactly the tolerance: not "more than"
    assert need_to_report(106, 100, 0, 0)
    assert need_to_report(94, 100, 0, 0)            # a drop counts as much as a rise


def test_report_zero_cases():
    assert not need_to_report(0, 0, 0, 0)
    assert need_to_report(1, 0, 0, 0)
    assert need_to_report(0, 100, 0, 0)             # stopping is reported at once (Pulsar waits for the round)


def test_report_either_dimension_triggers():
    assert need_to_report(100, 100, 50, 40, tolerance_pct=10)
    assert need_to_report(200, 100, 50, 50, tolerance_pct=10)
    assert not need_to_report(109, 100, 54, 50, tolerance_pct=10)


def test_report_mandatory_round():
    assert not need_to_report(100, 100, 10, 10, rounds_since_report=4, max_rounds=5)
    assert need_to_report(100, 100, 10, 10, rounds_since_report=5, max_rounds=5)
    assert need_to_report(0, 0, 0, 0, rounds_since_report=1, max_rounds=1)


def test_report_zero_tolerance_reports_any_change():
    assert need_to_report(100.001, 100, 1, 1, tolerance_pct=0)
    assert not need_to_report(100, 100, 1, 1, tolerance_pct=0)


@pytest.mark.parametrize("kwargs, match", [
    ({"bytes": -1}, "bytes must be a finite number >= 0"),
    ({"last_msgs": math.nan}, "last_msgs"),
    ({"tolerance_pct": -5}, "tolerance_pct"),
    ({"rounds_since_report": 1.0}, "rounds_since_report must be an integer >= 0"),
    ({"max_rounds": 0}, "max_rounds must be an integer >= 1"),
])
def test_report_rejects_bad_input(kwargs, match):
    args = {"bytes": 1, "last_bytes": 1, "msgs": 1, "last_msgs": 1} | kwargs
    with pytest.raises(ValueError, match=match):
        need_to_report(**args)


# ---------------------------------------------------------------- strategies, and the control loop

def test_strategy_parse_and_default():
    assert DEFAULT_STRATEGY is Strategy.FAIR
    assert Strategy.parse("proportional") is Strategy.PROPORTIONAL
    with pytest.raises(ValueError, match=r"strategy must be one of \['fair', 'proportional'\]"):
        local_quotas("even", 100, {"a": 1})


def test_local_quotas_proportional_matches_compute_local_quota():
    usages = {"a": 10, "b": 50, "c": 30}
    assert local_quotas("proportional", 100, usages) == {p: compute_local_quota(100, u, usages)
                                                         for p, u in usages.items()}


def test_local_quotas_fair_uses_demand_at_least_usage():
    # b's demand below its usage is taken as its usage: it wanted at least what it sent
    # (taking b's demand as 0 would give a=64.5, b=35.5)
    assert local_quotas("fair", 100, {"a": 10, "b": 60}, {"a": 30, "b": 0}) == {"a": 35, "b": 65}
    assert local_quotas(Strategy.FAIR, -1, {"a": 10}, {"a": 20}) == {"a": UNLIMITED}


def test_local_quotas_rejects_mismatched_participants():
    with pytest.raises(ValueError, match="same participants: only in usages \\[\"'b'\"\\], only in demands"):
        local_quotas("fair", 100, {"a": 1, "b": 1}, {"a": 1})


def simulate(strategy, demands, usages, intervals, configured=100):
    """Each interval: quotas from the reported map, then each participant sends min(demand, quota)."""
    history = []
    for _ in range(intervals):
        quotas = local_quotas(strategy, configured, usages, demands)
        usages = {p: min(demands[p], quotas[p]) for p in demands}
        history.append(usages)
    return history


def test_fair_converges_and_proportional_does_not():
    demands, start = {"a": 70, "b": 70}, {"a": 70, "b": 30}
    fair = simulate("fair", demands, start, intervals=10)
    assert all(u == approx(50, rel=0.05) for u in fair[2].values())   # 50/50 within 3 intervals (here: 1)
    assert fair[-1] == approx({"a": 50, "b": 50})
    proportional = simulate("proportional", demands, start, intervals=10)
    assert all(h == approx({"a": 70, "b": 30}, abs=1) for h in proportional)  # stuck at 70/30 forever


def test_fair_needs_real_demand():
    # documented limitation: a demand that is only the usage of a paused producer looks satisfied
    assert simulate("fair", {"a": 70, "b": 30}, {"a": 70, "b": 30}, intervals=5)[-1] == approx({"a": 70, "b": 30})


def test_fair_follows_demand_changes_within_one_interval():
    usages = {"a": 10, "b": 10, "c": 10}
    history = simulate("fair", {"a": 10, "b": 50, "c": 80}, usages, intervals=2)
    assert history[0] == approx({"a": 10, "b": 45, "c": 45})

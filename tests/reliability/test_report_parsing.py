"""Hypothesis on the wire schema (protocol/wire.py), and on what the control plane does with any valid report.

- Parsing never fails with anything but pydantic's ValidationError: arbitrary JSON-shaped data, valid reports with
  one value anywhere replaced by arbitrary data, and arbitrary text or bytes as JSON. The lenient answer models
  (what participants parse) likewise.
- Valid reports round-trip (Python and JSON) unchanged.
- Whatever the schema accepts, the control plane can hold and show: two reports of one participant, with values
  anywhere in the schema's ranges, are ingested, rendered as Prometheus metrics, shown by every state view as strict
  JSON (no NaN or infinity), and banked when the participant leaves. (This found /metrics and /v1/report failing
  with 500 for an integer counter beyond a float's range; integers are now bounded by MAX_COUNT.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError

from controlplane import views
from controlplane.state import LiveState
from metrics.collector import ThrottlescopeCollector
from protocol import (
    MAX_COUNT,
    MAX_NUMBER,
    MAX_QUEUE_ENTRIES,
    Goodbye,
    PolicySet,
    Report,
    ReportResponse,
    limit_key,
)
from tests.controlplane.fake_clock import FakeClock
from tests.reliability.conftest import counters as counter_samples

pytestmark = pytest.mark.unit
LEVELS = ("broker", "resource_group", "tenant", "namespace", "topic", "subscription")
SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- arbitrary data --------------------------------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30))
json_ish = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                        | st.dictionaries(st.text(max_size=20) | st.sampled_from(["seq", "usage", "participant",
                                                                                   "level", "name", "pid"]),
                                          inner, max_size=6), max_leaves=30)

# --- valid reports ----------------------------------------------------------------------------------------------

label = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="".join(map(chr, [*range(32), 127]))),
                min_size=1, max_size=24)
count = st.integers(0, MAX_COUNT)
non_neg = st.floats(0, MAX_NUMBER) | st.integers(0, 2**63)
number = st.floats(-MAX_NUMBER, MAX_NUMBER) | st.integers(-(2**63), 2**63)
positive = st.floats(0, MAX_NUMBER, exclude_min=True) | st.integers(1, 2**63)
level = st.sampled_from(LEVELS)
kind = st.sampled_from(["publish", "dispatch", "offload"])
direction = st.sampled_from(["publish", "dispatch"])
dimension = st.fixed_dictionaries({"tokens": number, "rate": number, "capacity": number},
                                  optional={"period_s": positive})
usage = st.fixed_dictionaries({"level": level, "name": label, "direction": direction}, optional={
    "usage_msgs_per_s": non_neg, "usage_bytes_per_s": non_neg, "demand_msgs_per_s": non_neg,
    "demand_bytes_per_s": non_neg})
bucket = st.fixed_dictionaries({"level": level, "name": label, "kind": kind},
                               optional={"msgs": dimension | st.none(), "bytes": dimension | st.none()})
queue = st.fixed_dictionaries({"level": level, "name": label}, optional={
    "length": count, "entries": st.lists(st.fixed_dictionaries({"producer": label, "waiting_s": non_neg}),
                                         max_size=4)})
counter = st.fixed_dictionaries({"level": level, "name": label, "kind": kind}, optional={
    "throttled_count": count, "throttle_time_seconds_total": non_neg, "admitted_msgs_total": non_neg,
    "admitted_bytes_total": non_neg})
offload = st.fixed_dictionaries({}, optional={
    "limit_bytes_per_s": st.just(-1) | st.floats(0, MAX_NUMBER), "limited_total": count, "read_bytes_total": non_neg,
    "offload_time_seconds_total": non_neg, "reading_max_bytes": non_neg, "errors_total": count,
    "rate_bytes_per_s": non_neg})
mutation = st.fixed_dictionaries({"user": label, "client_id": label, "tokens": number},
                                 optional={"rate": non_neg, "throttle_time_s": non_neg})


@st.composite
def reports(draw: st.DrawFn, sent_at: Any = positive) -> dict[str, Any]:
    used = draw(st.lists(usage, max_size=4, unique_by=lambda u: (u["level"], u["direction"], u["name"])))
    sent = {limit_key(u["level"], u["direction"], u["name"]) for u in used}
    unchanged = draw(st.lists(st.builds(limit_key, level, direction, label).filter(lambda k: k not in sent),
                              max_size=3, unique=True))
    return {
        "participant": {"participant_id": draw(label), "application_id": draw(label), "executor_id": draw(label),
                        "host": draw(label), "pid": draw(count)},
        "seq": draw(count), "sent_at": draw(sent_at), "interval_s": draw(positive),
        "applied_policy_version": draw(count), "usage": used, "usage_unchanged": unchanged,
        "buckets": draw(st.lists(bucket, max_size=4, unique_by=lambda b: (b["level"], b["kind"], b["name"]))),
        "queues": draw(st.lists(queue, max_size=3, unique_by=lambda q: (q["level"], q["name"]))),
        "counters": draw(st.lists(counter, max_size=4, unique_by=lambda c: (c["level"], c["kind"], c["name"]))),
        "dispatch_throttled": draw(st.dictionaries(level, count, max_size=3)),
        "offload": draw(st.none() | offload),
        "mutation_quotas": draw(st.lists(mutation, max_size=3, unique_by=lambda m: (m["user"], m["client_id"]))),
    }


def only_validation_errors(fn: Any, data: Any) -> Any:
    try:
        return fn(data)
    except ValidationError:
        return None


# --- parsing never fails otherwise -------------------------------------------------------------------------------

@SETTINGS
@given(json_ish)
def test_arbitrary_data_is_a_report_or_a_validation_error(data: Any) -> None:
    only_validation_errors(Report.model_validate, data)
    only_validation_errors(Goodbye.model_validate, data)
    only_validation_errors(ReportResponse.model_validate, data)
    only_validation_errors(PolicySet.model_validate, data)


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A valid report with one value somewhere (any depth) replaced by arbitrary data."""
    doc = draw(reports())
    node: Any = doc
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node))) if isinstance(node, list) else []
        if not keys:
            break
        key = draw(st.sampled_from(keys))
        if draw(st.booleans()) or not isinstance(node[key], dict | list) or not node[key]:
            node[key] = draw(json_ish)
            break
        node = node[key]
    return doc


@SETTINGS
@given(mutated())
def test_a_report_with_any_value_replaced_is_a_report_or_a_validation_error(doc: dict[str, Any]) -> None:
    parsed = only_validation_errors(Report.model_validate, doc)
    if parsed is not None:   # still valid: then it round-trips like any valid report
        assert Report.model_validate_json(parsed.model_dump_json()) == parsed


@SETTINGS
@given(st.text(max_size=200) | st.binary(max_size=200)
       | json_ish.map(lambda d: json.dumps(d, allow_nan=True))
       | reports().map(lambda r: json.dumps(r)[: len(json.dumps(r)) // 2]))
def test_arbitrary_text_or_bytes_is_a_report_or_a_validation_error(raw: str | bytes) -> None:
    only_validation_errors(Report.model_validate_json, raw)
    only_validation_errors(ReportResponse.model_validate_json, raw)


def test_out_of_range_integers_and_numbers_are_validation_errors() -> None:
    base = {"participant": {"participant_id": "p", "application_id": "a", "executor_id": "1", "host": "h", "pid": 1},
            "seq": 1, "sent_at": 1.0, "interval_s": 1.0}
    for change in ({"seq": MAX_COUNT + 1}, {"seq": 10**400}, {"seq": 1.5}, {"seq": "1"}, {"seq": True},
                   {"sent_at": 1e301}, {"interval_s": float("inf")},
                   {"counters": [{"level": "broker", "name": "b", "kind": "publish", "throttled_count": 10**400}]},
                   {"queues": [{"level": "topic", "name": "q", "entries": [{"producer": "p", "waiting_s": 0}] *
                                (MAX_QUEUE_ENTRIES + 1)}]}):
        with pytest.raises(ValidationError):
            Report.model_validate({**base, **change})
    assert Report.model_validate({**base, "seq": 7.0}).seq == 7          # JSON Schema's integer: 7.0 is one
    assert Report.model_validate({**base, "seq": MAX_COUNT}).seq == MAX_COUNT


# --- valid reports round-trip ------------------------------------------------------------------------------------

@SETTINGS
@given(reports())
def test_valid_reports_round_trip(doc: dict[str, Any]) -> None:
    r = Report.model_validate(doc)
    assert Report.model_validate_json(r.model_dump_json()) == r
    assert Report.model_validate(r.model_dump()) == r
    assert Report.model_validate_json(json.dumps(doc)) == r


# --- whatever is accepted can be held and shown --------------------------------------------------------------------

@settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(reports(sent_at=st.just(0.0)), reports(sent_at=st.just(0.0)))
def test_any_valid_report_is_ingested_rendered_and_shown(first: dict[str, Any], second: dict[str, Any]) -> None:
    clock = FakeClock()
    live = LiveState(1.0, clock)
    groups = {u["name"]: {"publishRateInMsgs": 100} for u in first["usage"] if u["level"] == "resource_group"}
    policies = PolicySet.model_validate({"version": 2, "resourceGroups": groups})
    collector = ThrottlescopeCollector(live, lambda: policies)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    live.listener = collector
    second["participant"] = first["participant"]
    for i, doc in enumerate((first, second)):
        clock.t += 1.0
        accepted, reason = live.ingest(Report.model_validate({**doc, "seq": i + 1, "sent_at": clock.t}))
        assert accepted, reason
        keys = [limit_key(u["level"], u["direction"], u["name"]) for u in doc["usage"]] + doc["usage_unchanged"]
        json.dumps(ReportResponse(policyVersion=2, usage=live.usage_map(keys), reportIntervalSeconds=1.0)
                   .model_dump(mode="json"), allow_nan=False)
        text = generate_latest(registry).decode()
        assert "throttlescope_participants 1.0" in text
        for view in (views.participants(live, 2), views.buckets(live), views.queues(live), views.history(live),
                     views.resource_groups(live, policies)):
            json.dumps(view.model_dump(mode="json"), allow_nan=False)   # what FastAPI's JSON answers need
    assert live.goodbye(first["participant"]["participant_id"])
    text = generate_latest(registry).decode()
    assert 'throttlescope_participants_departed_total{reason="goodbye"} 1.0' in text
    totals = {labels: v for (name, labels), v in counter_samples(text).items()
              if name == "throttlescope_admitted_messages_total"}
    for c in second["counters"]:      # the departed participant's totals are kept (banked), not dropped
        labels = tuple(sorted({"level": c["level"], "kind": c["kind"], "name": c["name"]}.items()))
        assert totals[labels] >= float(c.get("admitted_msgs_total", 0)) * (1 - 1e-12)


def test_fair_split_survives_extreme_demands_and_capacities() -> None:
    """Found by the property above: a demand ~1e295 over a capacity of 100 (or any demand over a capacity of
    1e-300) overflowed the fair split, failing /metrics, /v1/state/resourcegroups and every participant's share."""
    from limiter.quota import local_quotas

    assert local_quotas("fair", 100, {"a": 1e300, "b": 5}, {"a": 1e300, "b": 5}) == {"a": 95, "b": 5}
    shares = local_quotas("fair", 1e-300, {"a": 50, "b": 50}, {"a": 50, "b": MAX_NUMBER})
    assert shares["a"] == shares["b"] and 0 < shares["a"] + shares["b"] <= 1e-300
    assert local_quotas("fair", MAX_NUMBER, {"a": MAX_NUMBER}) == {"a": MAX_NUMBER}

"""The protocol models (protocol/) and the admin request bodies, without a server."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from controlplane.models import DispatchRateBody, MutationQuotaBody, PublishRateBody, ResourceGroupBody
from protocol import (
    MAX_NUMBER,
    MAX_QUEUE_ENTRIES,
    PolicySet,
    Report,
    ReportResponse,
    limit_key,
    parse_limit_key,
    unknown_field_reason,
)
from protocol.fields import Count, NonNeg, Number, Positive, Window

from .conftest import report, usage

pytestmark = pytest.mark.unit


def test_valid_report_round_trips() -> None:
    r = Report.model_validate(report(usage=[usage("rg", 5, 9)], buckets=[
        {"level": "topic", "name": "t/n/x", "kind": "publish",
         "msgs": {"tokens": -3.5, "rate": 10, "capacity": 10, "period_s": 1}}],
        queues=[{"level": "topic", "name": "t/n/x", "length": 2,
                 "entries": [{"producer": "a", "waiting_s": 0.5}, {"producer": "b", "waiting_s": 0.1}]}],
        counters=[{"level": "broker", "name": "broker", "kind": "dispatch", "throttled_count": 3}],
        dispatch_throttled={"subscription": 4}, offload={"limit_bytes_per_s": 1000, "limited_total": 2},
        mutation_quotas=[{"user": "u", "client_id": "c", "tokens": -1, "rate": 2, "throttle_time_s": 0.5}]))
    assert r.usage[0].demand_msgs_per_s == 9 and r.buckets[0].msgs is not None and r.buckets[0].msgs.tokens == -3.5
    assert Report.model_validate_json(r.model_dump_json()) == r


@pytest.mark.parametrize(("change", "needle"), [
    ({"extra": 1}, "extra\n  Extra inputs are not permitted"),
    ({"seq": -1}, "seq"),
    ({"seq": "1"}, "seq"),
    ({"interval_s": 0}, "interval_s"),
    ({"usage": [usage("rg", -1)]}, "must be >= 0"),
    ({"usage": [usage("rg", math.inf)]}, "finite"),
    ({"usage": [usage("rg", 1), usage("rg", 2)]}, "duplicate usage entry"),
    ({"usage": [{**usage("rg", 1), "level": "galaxy"}]}, "level"),
    ({"usage": [{**usage("rg", 1), "direction": "sideways"}]}, "direction"),
    ({"usage": [usage("x" * 600, 1)]}, "at most 512"),
    ({"queues": [{"level": "topic", "name": "q",
                  "entries": [{"producer": "p", "waiting_s": 0}] * (MAX_QUEUE_ENTRIES + 1)}]}, "at most 256"),
    ({"participant": {"participant_id": "p", "application_id": "a", "executor_id": "1", "host": "h", "pid": 1,
                      "evil": True}}, "participant.evil\n  Extra inputs are not permitted"),
    ({"participant": {"participant_id": "p\n", "application_id": "a", "executor_id": "1", "host": "h",
                      "pid": 1}}, "participant_id"),
    ({"dispatch_throttled": {"nowhere": 1}}, "dispatch_throttled"),
])
def test_malformed_reports_are_rejected(change: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as e:
        Report.model_validate({**report(), **change})
    assert needle in str(e.value)


@pytest.mark.parametrize(("loc", "reason"), [
    (["extra"], "unknown field 'extra'; allowed: participant, seq, sent_at, interval_s, applied_policy_version,"),
    (["participant", "evil"], "unknown field 'evil' in participant; allowed: participant_id, application_id, "
                              "executor_id, host, pid"),
    (["buckets", 3, "msgs", "x"], "unknown field 'x' in buckets.3.msgs; allowed: tokens, rate, capacity, period_s"),
    (["dispatch_throttled", "nowhere", "x"], "unknown field 'x' in dispatch_throttled.nowhere is not allowed"),
    ([], "unknown field '?'; allowed: participant, seq,"),
])
def test_an_unknown_field_is_named_with_the_fields_allowed_where_it_is(loc: list[Any], reason: str) -> None:
    assert unknown_field_reason(Report, loc).startswith(reason)


@pytest.mark.parametrize("kind", [Number, NonNeg, Positive, Window, Count])
def test_a_number_is_accepted_exactly_within_the_range_its_schema_states(kind: Any) -> None:
    # what a client is told (the JSON schema) is what is accepted: inside it a number passes in one step, outside it
    # the full checks say why not
    adapter = TypeAdapter(kind)
    schema = adapter.json_schema()
    low, high = schema.get("minimum", schema.get("exclusiveMinimum")), schema["maximum"]
    for value in (-MAX_NUMBER, -2**53, -1, -0.5, -1e-300, 0, 0.0, 1e-300, 0.5, 1, 2.0, 3600, 3600.5, 2**53 - 1, 2**53,
                  MAX_NUMBER, 2e300, 10**400, math.inf, -math.inf, math.nan, True, "1"):
        inside = (type(value) in (int, float) and value <= high   # (NaN: no comparison holds)
                  and (low < value if "exclusiveMinimum" in schema else low <= value))
        if schema["type"] == "integer":
            inside = inside and (type(value) is int or value.is_integer())
        try:
            adapter.validate_python(value)
            accepted = True
        except ValidationError:
            accepted = False
        assert accepted == inside, (value, schema)


@pytest.mark.parametrize("value", [-2, -0.5, math.nan, math.inf, "10", True, None, 10**400])
def test_rates_must_be_finite_non_negative_or_minus_one(value: Any) -> None:
    for model, field in ((ResourceGroupBody, "publishRateInMsgs"), (PublishRateBody, "publishThrottlingRateInMsg"),
                         (DispatchRateBody, "dispatchThrottlingRateInByte"), (MutationQuotaBody, "quotaPerSecond")):
        if model is ResourceGroupBody and value is None:
            continue    # a resource group's rate sent as null is "not sent" (Pulsar's boxed Integer): see below
        with pytest.raises(ValidationError):
            model.model_validate({field: value})


def test_rates_accept_zero_positive_and_minus_one() -> None:
    for v in (-1, 0, 0.5, 10, 1e12):
        assert ResourceGroupBody(publishRateInMsgs=v).publishRateInMsgs == v
    assert PublishRateBody().ratePeriodInSecond == 1 and DispatchRateBody().relativeToPublishRate is False
    with pytest.raises(ValidationError):
        PublishRateBody(ratePeriodInSecond=0)
    with pytest.raises(ValidationError):
        MutationQuotaBody(quotaPerSecond=1, samples=0)
    with pytest.raises(ValidationError):
        MutationQuotaBody(quotaPerSecond=1, windowSeconds=0)


def test_bodies_ignore_unknown_fields_and_name_them() -> None:
    body = ResourceGroupBody.model_validate({"publishRateInMsg": 1, "replicationDispatchRateInMsgs": 5,
                                             "dispatchRateInMsgs": 7})
    assert body.ignored() == ["publishRateInMsg", "replicationDispatchRateInMsgs"]
    assert body.known(exclude_unset=True) == {"dispatchRateInMsgs": 7}
    rate = DispatchRateBody.model_validate({"dispatchThrottlingRateInMsg": 3, "future": {"a": 1}})
    assert rate.ignored() == ["future"] and "future" not in rate.known()


def test_resource_group_update_changes_only_the_fields_sent() -> None:
    old = {"publishRateInMsgs": 1, "publishRateInBytes": 2, "dispatchRateInMsgs": 3, "dispatchRateInBytes": 4,
           "quotaStrategy": "fair"}
    assert ResourceGroupBody.model_validate({"publishRateInMsgs": 5000}).merged(old) == {**old, "publishRateInMsgs": 5000}
    assert ResourceGroupBody.model_validate({"publishRateInMsgs": None}).merged(old) == old   # null: not sent
    cleared = ResourceGroupBody.model_validate({"quotaStrategy": None}).merged(old)
    assert "quotaStrategy" not in cleared and cleared["dispatchRateInBytes"] == 4
    assert ResourceGroupBody.model_validate({"dispatchRateInBytes": 9}).merged(None) == {
        "publishRateInMsgs": -1, "publishRateInBytes": -1, "dispatchRateInMsgs": -1, "dispatchRateInBytes": 9}


def test_responses_are_lenient_for_older_participants() -> None:
    doc = {"version": 3, "resourceGroups": {"rg": {"publishRateInMsgs": 5, "futureField": 1}}, "future": {}}
    ps = PolicySet.model_validate(doc)
    assert ps.resourceGroups["rg"].publishRateInMsgs == 5
    resp = ReportResponse.model_validate({"policyVersion": 3, "policies": doc, "reportIntervalSeconds": 1,
                                          "usage": {}, "later": True})
    assert resp.policies is not None and resp.policies.version == 3


def test_limit_key_round_trip_with_colons() -> None:
    key = limit_key("topic", "publish", "t/n:x:y")
    assert key == "topic:publish:t/n:x:y" and parse_limit_key(key) == ("topic", "publish", "t/n:x:y")

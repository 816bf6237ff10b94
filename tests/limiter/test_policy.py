import math

import pytest

from limiter import Level, PolicyError, Rate, resolve

pytestmark = pytest.mark.unit


def test_rate_value_object():
    r = Rate(msgs=100, bytes=-1, period_s=2)
    assert r.msgs_limited and not r.bytes_limited and not r.is_unlimited
    assert r.msgs_per_s() == 50 and r.bytes_per_s() == math.inf
    assert Rate.unlimited().is_unlimited and Rate(0, 0).is_unlimited
    assert str(r) == "100 msgs, unlimited bytes per 2s"
    assert r.scaled(0.5) == Rate(50, -1, 2)


@pytest.mark.parametrize("kwargs, message", [
    ({"msgs": -2}, "msgs must be a finite number >= 0, or -1"), ({"bytes": math.nan}, "bytes must be"),
    ({"msgs": math.inf}, "msgs must be"), ({"msgs": "10"}, "msgs must be a number"),
    ({"period_s": 0}, "period_s must be"), ({"msgs": True}, "msgs must be a number"),
])
def test_invalid_rates_say_what_is_allowed(kwargs, message):
    with pytest.raises(PolicyError, match=message):
        Rate(**kwargs)


def test_raise_detection():
    assert Rate(20).is_raise_of(Rate(10))
    assert Rate.unlimited().is_raise_of(Rate(10, 10))
    assert not Rate(5).is_raise_of(Rate(10))
    assert not Rate(10, 5).is_raise_of(Rate(10, 10))
    assert Rate(10, period_s=0.5).is_raise_of(Rate(10))  # 20/s beats 10/s


def test_resolve_takes_the_most_specific_set_value():
    assert resolve((Level.TOPIC, None), (Level.NAMESPACE, Rate(5))) == (Rate(5), Level.NAMESPACE)
    assert resolve((Level.TOPIC, None)) == (Rate.unlimited(), None)

import logging
import threading

import pytest

from limiter import ThrottleReason, ThrottleTracker

pytestmark = pytest.mark.unit


def tracker_with_log():
    events = []
    tracker = ThrottleTracker(on_pause=lambda: events.append("pause"), on_resume=lambda: events.append("resume"))
    return tracker, events


def test_worked_example_from_the_essay(caplog):
    t, events = tracker_with_log()
    assert t.mark(ThrottleReason.TOPIC_RATE)
    assert events == ["pause"]
    t.mark(ThrottleReason.BROKER_RATE)
    t.mark(ThrottleReason.TOPIC_RATE)
    assert t.count(ThrottleReason.TOPIC_RATE) == 2
    t.unmark(ThrottleReason.TOPIC_RATE)
    t.unmark(ThrottleReason.TOPIC_RATE)
    assert t.throttled and events == ["pause"]
    t.unmark(ThrottleReason.BROKER_RATE)
    assert not t.throttled and events == ["pause", "resume"]
    with caplog.at_level(logging.ERROR):
        assert t.unmark(ThrottleReason.TOPIC_RATE) is False
    assert t.mismatched_unmarks == 1 and not t.throttled and t.count(ThrottleReason.TOPIC_RATE) == 0
    assert "without a matching mark" in caplog.text
    assert events == ["pause", "resume"]


def test_capacity_reasons_are_on_off():
    t, events = tracker_with_log()
    assert t.mark(ThrottleReason.PENDING_PUBLISH_REQUESTS)
    assert t.mark(ThrottleReason.PENDING_PUBLISH_REQUESTS) is False  # dropped
    assert t.count(ThrottleReason.PENDING_PUBLISH_REQUESTS) == 1
    t.unmark(ThrottleReason.PENDING_PUBLISH_REQUESTS)
    assert not t.throttled and events == ["pause", "resume"]


def test_paused_while_any_reason_holds():
    t, events = tracker_with_log()
    t.mark(ThrottleReason.PUBLISH_BUFFER_MEMORY)
    t.mark(ThrottleReason.TOPIC_RATE)
    t.unmark(ThrottleReason.PUBLISH_BUFFER_MEMORY)
    assert t.throttled and events == ["pause"]
    assert t.reasons() == {ThrottleReason.TOPIC_RATE: 1}


def test_mismatched_unmarks_are_logged_once_and_all_counted(caplog):
    t, _ = tracker_with_log()
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            t.unmark(ThrottleReason.BROKER_RATE)
    assert t.mismatched_unmarks == 3
    assert caplog.text.count("without a matching mark") == 1


def test_callbacks_may_call_back_into_the_tracker():
    t = ThrottleTracker()
    t._on_pause = lambda: t.reasons()
    t.mark(ThrottleReason.TOPIC_RATE)
    assert t.throttled


def test_concurrent_marks_and_unmarks_end_balanced_with_one_transition_each_way():
    t, events = tracker_with_log()
    t.mark(ThrottleReason.BROKER_RATE)  # hold it paused during the storm

    def storm():
        for _ in range(5000):
            t.mark(ThrottleReason.TOPIC_RATE)
            t.unmark(ThrottleReason.TOPIC_RATE)

    threads = [threading.Thread(target=storm) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert t.count(ThrottleReason.TOPIC_RATE) == 0 and t.mismatched_unmarks == 0
    t.unmark(ThrottleReason.BROKER_RATE)
    assert events == ["pause", "resume"]


def test_reasons_name_their_level_and_kind():
    assert ThrottleReason.TOPIC_RATE.level == "topic" and ThrottleReason.TOPIC_RATE.reentrant
    assert not ThrottleReason.PENDING_PUBLISH_REQUESTS.reentrant

"""The live pages' stamp: when they refreshed, and how old each view is that the control plane handed out again
instead of rendering it anew (its ``Age``)."""

from __future__ import annotations

import pytest

from dashboard import ui
from protocol.state import QueuesState

pytestmark = pytest.mark.unit


def queues(age_s: float | None) -> QueuesState:
    view = QueuesState(queues=[])
    view.set_age_s(age_s)
    return view


def test_the_stamp_names_each_view_rendered_earlier_with_its_age_and_nothing_of_those_rendered_for_the_read() -> None:
    assert ui.aged({"queues": queues(None), "history": None}) == ""   # (None: a view the page could not read)
    words = ui.aged({"shared_limits": queues(7.0), "history": queues(None), "buckets": queues(12.4)})
    assert words == ("; rendered earlier by the control plane, which renders views this large at most so often: "
                     "shared limits 7 s, buckets 12 s old")


def test_a_view_s_age_is_not_part_of_what_it_says() -> None:
    assert queues(7.0).model_dump() == queues(None).model_dump() and "age" not in queues(7.0).model_dump_json().lower()

"""collectors.share_rows.ShareRows: one row of machine numbers per shared limit, found by its key."""

from __future__ import annotations

import math
import random
import threading
import tracemalloc

import pytest

from collectors.grants import GrantKeeper, Grants
from collectors.share_rows import NONE, ShareRows

pytestmark = pytest.mark.unit


def test_a_key_keeps_its_row_and_a_new_row_starts_at_every_columns_default() -> None:
    rows = ShareRows()
    at = rows.column("d", -math.inf)
    rate = rows.column("f", NONE)
    a = rows.add("topic:publish:a")
    at[a], rate[a] = 12.5, 100.0
    b = rows.add("topic:publish:b")
    assert rows.add("topic:publish:a") == a != b and rows.get("topic:publish:a") == a
    assert (at[a], rate[a]) == (12.5, 100.0)
    assert at[b] == -math.inf and math.isnan(rate[b])
    assert rows.get("topic:publish:c") is None and "topic:publish:c" not in rows and "topic:publish:b" in rows
    late = rows.column("B", 1)   # a column made after rows exist has them all, at its default
    assert (late[a], late[b]) == (1, 1)


def test_a_forgotten_keys_row_is_reused_by_the_next_new_key_at_the_defaults() -> None:
    rows = ShareRows()
    at = rows.column("d", 0.0)
    for key in ("a", "b", "c"):
        at[rows.add(key)] = 7.0
    freed = rows.get("b")
    assert rows.forget({"a", "c"}) == ["b"]
    assert rows.get("b") is None and len(rows) == 2 and sorted(rows) == ["a", "c"]
    assert rows.forget(["a", "c"]) == []            # nothing more to forget
    assert rows.add("d") == freed and at[freed] == 0.0
    assert rows.read("b", at) is None and rows.read("d", at) == (0.0,)   # (the row is "d"'s now, not "b"'s)
    assert rows.read("a", at, at) == (7.0, 7.0)
    assert at[rows.get("a")] == 7.0 and at[rows.get("c")] == 7.0   # the others' rows did not move


def test_lookups_agree_with_a_dict_over_random_adds_and_forgets() -> None:
    rng = random.Random(7)
    rows, truth = ShareRows(), {}
    tag = rows.column("d", -1.0)
    for step in range(3000):
        key = f"topic:publish:t{rng.randrange(400)}"
        if rng.random() < 0.02:
            keep = {k for k in truth if rng.random() < 0.7}
            assert sorted(rows.forget(keep)) == sorted(set(truth) - keep)
            truth = {k: v for k, v in truth.items() if k in keep}
        row = rows.add(key)
        if key not in truth:
            assert tag[row] == -1.0        # a new or reused row starts at the default
            truth[key] = step
            tag[row] = step
        assert tag[row] == truth[key]
    assert sorted(rows) == sorted(truth)
    assert all(tag[rows.get(k)] == v for k, v in truth.items())


def test_lookups_from_another_thread_while_keys_are_added_find_each_keys_own_row() -> None:
    rows = ShareRows()
    tag = rows.column("d", -1.0)
    keys = [f"tenant:publish:t{i}" for i in random.Random(3).sample(range(20_000), 20_000)]
    wrong, done = [], threading.Event()

    def reader() -> None:
        while not done.is_set():
            for i in range(0, len(keys), 97):
                row = rows.get(keys[i])
                if row is not None and tag[row] not in (-1.0, i):
                    wrong.append((keys[i], tag[row]))

    t = threading.Thread(target=reader)
    t.start()
    for i, key in enumerate(keys):
        tag[rows.add(key)] = i
    done.set()
    t.join()
    assert wrong == []


def test_a_column_of_another_kind_is_refused_with_the_kinds_allowed() -> None:
    with pytest.raises(ValueError, match="typecode must be 'd', 'f' or 'B', got 'q'"):
        ShareRows().column("q", 0)


def test_a_participants_share_state_takes_under_100_bytes_a_limit_beside_its_key() -> None:
    """Every column a participant keeps (the answers', the keeper's and its spend log's) over 5,000 limits."""
    grants = Grants(lambda: 0.0)
    keeper = GrantKeeper("p", grants, lambda: [], lambda request: [], lambda: None, lambda: 0.0)
    keys = [f"topic:publish:g0/ns{i // 100}/t{i % 100}" for i in range(5000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for key in keys:
            keeper.spends.look(key, (10.0, None), 1.0)   # (a row for every limit, each column filled)
        per_limit = (tracemalloc.get_traced_memory()[0] - before) / len(keys)
    finally:
        tracemalloc.stop()
    assert len(grants.rows) == 5000
    # 86 B of columns and 12 B of index a limit, and the lists' and arrays' room to grow (the keys were made
    # before; the dicts of tuples and float objects this replaced took 132 B for the spend log alone)
    assert per_limit < 110, per_limit

"""The control plane's garbage-collector policy (``controlplane.heap``), on CPython's real collector.

Each case runs in a fresh interpreter: freezing the heap is process-wide, and the test process's own collector
must stay as pytest left it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from controlplane.heap import HeapFreezer

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

# A report's worth of objects that dies by reference counting, and a cycle that only the collector can free: a
# weak reference to it says whether it was collected.
PRELUDE = """
import gc, json, sys, weakref
from controlplane.heap import HeapFreezer

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

now = [0.0]
freezer = HeapFreezer(freeze_every_s=0.1, sweep_every_s=0.3, growth=2.0, min_interval_s=60.0,
                      clock=lambda: now[0]).start(thread=False)
out = {}
"""


def run(body: str) -> dict:
    script = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_tick_freezes_what_lives_on_so_no_collection_scans_it():
    out = run("""
        live = [{"n": i, "values": [i, i + 1]} for i in range(30_000)]   # the latest reports
        before = gc.get_freeze_count()
        freezer.tick()                                                    # (the first of three: no sweep)
        out["frozen"] = gc.get_freeze_count() - before
        out["young"] = gc.get_count()[0]
        out["threshold"] = gc.get_threshold()[0]
        out["collected"] = freezer.full_collections
    """)
    assert out["frozen"] >= 60_000      # each dict and its list
    assert out["young"] == 0
    assert out["threshold"] == 50_000
    assert out["collected"] == 0


def test_a_sweep_frees_the_cycles_that_died_since_the_last_tick_and_sweeps_every_tick_while_it_finds_some():
    out = run("""
        def died_before_tick():
            ref = cycle()            # unreachable at once: only the collector can free it
            freezer.tick()
            gc.collect()             # (sees no frozen object)
            return ref() is None

        out["ticks"] = [died_before_tick(), died_before_tick(), died_before_tick(),   # the third sweeps
                        died_before_tick(),                                          # sweeping: it found one
                        freezer.tick() or freezer.sweeping,                          # none found: no longer
                        died_before_tick()]
        out["swept"] = freezer.swept
    """)
    assert out["ticks"] == [False, False, True, True, False, True], out   # the sixth is a sweep's own tick
    assert out["swept"] >= 3 * 2


def test_a_cycle_frozen_before_it_died_waits_for_the_full_collection_which_waits_for_growth_and_the_interval():
    out = run("""
        freezer.pause_share = 1.0          # (the pause's own rule has its test: a loaded machine's pause is longer)
        dead = cycle()
        freezer.tick()                     # frozen (no sweep before it); unreachable already
        gc.collect()
        out["after_collect"] = dead() is not None          # the collector does not see frozen objects
        now[0] = 100.0
        out["no_growth"] = freezer.tick()                  # interval passed, heap not doubled: nothing
        grown = [[i] for i in range(3 * freezer.blocks_after_full)]
        now[0] = 101.0
        out["grown"] = freezer.tick()
        out["freed"] = dead() is None
        out["live_kept"] = len(grown)
        out["full_at_s"] = freezer.full_at_s
        again = [[i] for i in range(3 * freezer.blocks_after_full)]
        now[0] = 160.0
        out["too_soon"] = freezer.tick()                   # doubled again, but 59 s after the last one
        now[0] = 161.0
        out["after_interval"] = freezer.tick()
        out["full_collections"] = freezer.full_collections
    """)
    assert out["after_collect"] is True
    assert out["no_growth"] is False
    assert out["grown"] is True and out["freed"] is True and out["full_at_s"] == 101.0
    assert out["live_kept"] > 0
    assert out["too_soon"] is False
    assert out["after_interval"] is True and out["full_collections"] == 2


def test_a_heap_whose_full_collection_would_pause_long_is_collected_so_rarely_that_pauses_take_half_a_percent():
    out = run("""
        dead = cycle()
        freezer.tick()                                     # frozen before it died: only a full collection frees it
        grown = [[i] for i in range(3 * freezer.blocks_after_full)]
        freezer.seconds_per_block = 1e-4                   # as if the last full collection had taken 0.1 ms a block
        blocks = sys.getallocatedblocks()
        out["interval_s"] = freezer.full_interval_s(blocks)
        out["expected_s"] = blocks * 1e-4 / 0.005
        now[0] = 61.0
        out["after_60_s"] = freezer.tick()                 # grown, past min_interval_s, but the pause would be long
        now[0] = out["interval_s"] - 1
        out["just_before"] = freezer.tick()
        now[0] = out["interval_s"] + 1
        out["after"] = freezer.tick()
        out["freed"] = dead() is None
        out["measured"] = [freezer.last_pause_s, freezer.seconds_per_block]
        out["small_heap_s"] = freezer.full_interval_s(1000)
    """)
    assert out["interval_s"] == pytest.approx(out["expected_s"]) and out["interval_s"] > 60 * 10
    assert out["after_60_s"] is False and out["just_before"] is False
    assert out["after"] is True and out["freed"] is True
    pause_s, per_block_s = out["measured"]
    assert 0 < pause_s < 10 and 0 < per_block_s < 1e-4      # what this collection took a block, read from now on
    assert out["small_heap_s"] == 60.0                      # a small heap: min_interval_s as before


def test_past_the_least_interval_the_heap_s_size_is_read_once_a_sweep_interval_not_at_every_tick():
    # (its read walks pymalloc's arenas: 2.7 ms at a 3-GB heap, ten ticks a second)
    out = run("""
        reads, real = [0], sys.getallocatedblocks
        def counted():
            reads[0] += 1
            return real()
        sys.getallocatedblocks = counted
        now[0] = 100.0
        for _ in range(10):
            freezer.tick()                                 # the same moment: one read
        out["at_once"] = reads[0]
        now[0] = 100.2
        freezer.tick()                                     # within the sweep interval (0.3 s): none
        out["within"] = reads[0]
        now[0] = 100.5
        freezer.tick()
        out["after"] = reads[0]
    """)
    assert out == {"at_once": 1, "within": 1, "after": 2}


def test_the_thread_is_a_daemon_that_stops_and_leaves_the_collector_as_it_found_it():
    out = run("""
        freezer.stop()                                    # (the prelude's)
        before = gc.get_threshold()
        freezer = HeapFreezer().start()
        thread = freezer._thread
        out["started"] = [thread.name, thread.daemon, thread.is_alive(), gc.get_threshold()[0]]
        freezer.stop()
        out["stopped"] = [thread.is_alive(), freezer._thread is None, gc.get_freeze_count(),
                          gc.get_threshold() == before]
    """)
    assert out == {"started": ["heap-freezer", True, True, 50_000], "stopped": [False, True, 0, True]}


@pytest.mark.parametrize("kwargs, message", [
    ({"freeze_every_s": 0}, "freeze_every_s must be a finite number of seconds > 0, got 0"),
    ({"freeze_every_s": True}, "freeze_every_s must be a finite number of seconds > 0, got True"),
    ({"min_interval_s": -1}, "min_interval_s must be a finite number of seconds > 0, got -1"),
    ({"sweep_every_s": None}, "sweep_every_s must be a finite number of seconds > 0, got None"),
    ({"growth": 1}, "growth must be a finite number > 1"),
    ({"growth": "2"}, "growth must be a finite number > 1"),
    ({"growth": float("inf")}, "growth must be a finite number > 1"),
    ({"pause_share": 0}, "pause_share must be a finite number > 0 and <= 1"),
    ({"pause_share": 1.5}, "pause_share must be a finite number > 0 and <= 1"),
    ({"pause_share": float("nan")}, "pause_share must be a finite number > 0 and <= 1"),
])
def test_bad_settings_say_what_is_allowed(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HeapFreezer(**kwargs)

"""A participant process for the integration tests: ``python -m tests.collectors.participant_proc '<json>'``.

It creates the runtime from the environment (THROTTLESCOPE_URL, ...), one producer on ``topic``, waits until
``start_at`` (wall time, so several processes start together), then sends one message at a time paced to the
demand of the current phase (``phases``: [[seconds after start, msgs/s], ...]; a paused producer does not
catch up afterwards, short scheduling jitter is) until ``duration`` has passed. A
sampler thread writes JSON lines to ``out`` every ``sample_s``: wall time, messages admitted so far, and the local
rate of the limiter named by ``watch`` ([level, name]), and the seconds spent so far waiting in ``acquire``
(``waited_s``: a participant that falls behind its demand without waiting there was kept from running by the
host, not held by the limiter). It exits normally (so the runtime says goodbye), or stops
at once without goodbye when ``hard_exit`` is true (``os._exit``, like a PySpark worker).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

CATCH_UP_S = 0.05  # a send late by less than this is caught up (scheduling jitter); later: the pace restarts


def main(spec: dict) -> None:
    from collectors import participant

    with open(spec["out"], "w", buffering=1) as out:
        run(spec, participant(), out)
    if spec.get("hard_exit"):
        os._exit(0)   # no atexit: no goodbye (a killed worker)


def run(spec: dict, p, out) -> None:
    ready = p.wait_ready(10.0)
    producer = p.producer(spec["topic"])
    watch = spec.get("watch")
    limiter = p.limits.limiter(*watch) if watch else None
    out.write(json.dumps({"event": "start", "participant_id": p.participant_id, "pid": os.getpid(),
                          "ready": ready}) + "\n")
    # "wait": (seconds waited in finished acquires, when the acquire in progress began or None), one tuple so
    # the sampler reads both as one; the acquire in progress counts too: a sample taken while it waits shows it
    state = {"n": 0, "wait": (0.0, None), "stop": False}

    def waited_s() -> float:
        done, asked = state["wait"]
        return done + (time.monotonic() - asked if asked is not None else 0.0)

    def sample() -> None:
        while not state["stop"]:
            rate = limiter.rate.msgs if limiter is not None else -1
            out.write(json.dumps({"t": time.time(), "n": state["n"], "rate": rate, "waited_s": waited_s(),
                                  "connected": p.connected}) + "\n")
            time.sleep(spec.get("sample_s", 0.05))

    start_at = spec.get("start_at", time.time())
    while time.time() < start_at:
        time.sleep(0.005)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    phases = spec["phases"]
    t0 = time.monotonic()
    end = t0 + spec["duration"]
    sched = t0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        demand = [rate for at, rate in phases if now - t0 >= at][-1]
        if sched > now:
            time.sleep(sched - now)
        done, asked = state["wait"][0], time.monotonic()
        state["wait"] = (done, asked)
        admitted = producer.acquire(1, timeout_s=0.5)
        now = time.monotonic()
        state["wait"] = (done + now - asked, None)
        state["n"] += admitted
        sched = (sched if now - sched < CATCH_UP_S else now) + 1.0 / demand
    state["stop"] = True
    sampler.join()
    out.write(json.dumps({"t": time.time(), "n": state["n"], "rate": limiter.rate.msgs if limiter else -1,
                          "waited_s": waited_s(), "connected": p.connected}) + "\n")
    out.write(json.dumps({"event": "end"}) + "\n")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

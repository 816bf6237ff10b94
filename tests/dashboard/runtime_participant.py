"""A real participant for the browser test: ``collectors.participant()`` (the participant runtime) under load.

``python -m tests.dashboard.runtime_participant`` with THROTTLESCOPE_URL and THROTTLESCOPE_TOKEN set. One thread
per producer sends batches (``Producer.acquire`` waits while any level throttles it), one thread offloads through
the runtime's ``OffloadThrottle`` and one records mutations on its KIP-599 quotas; the runtime's reporter thread
reports them and applies every policy change. SIGTERM stops the load and says goodbye (``close``).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

from collectors import participant
from limiter.mutation import ThrottlingQuotaExceeded

from .participant import BATCH, LOAD, MSG_BYTES, MUTATIONS, READ_BYTES


def _send(stop: threading.Event, producer, want: float) -> None:  # type: ignore[no-untyped-def]
    while not stop.is_set():
        if producer.acquire(msgs=BATCH, bytes=BATCH * MSG_BYTES, timeout_s=0.5):
            stop.wait(BATCH / want)


def _offload(stop: threading.Event) -> None:
    throttle = participant().offload
    while not stop.is_set():
        ticket = throttle.before_read(1, READ_BYTES)
        if ticket.delay_s:
            stop.wait(ticket.delay_s)
        throttle.after_read(ticket, READ_BYTES)
        stop.wait(0.05)


def _mutate(stop: threading.Event) -> None:
    me, now, due = participant(), 0.0, [0.0] * len(MUTATIONS)
    while not stop.is_set():
        for i, (user, client, per_s, batch) in enumerate(MUTATIONS):
            quota = me.mutation_quota(user, client)
            if now >= due[i] and quota is not None:
                due[i] = now + batch / per_s          # one request of ``batch`` mutations at ``per_s`` on average
                with contextlib.suppress(ThrottlingQuotaExceeded):
                    quota.record(batch)
        stop.wait(0.25)
        now += 0.25


def main() -> int:
    me = participant()
    me.wait_ready(10)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=_send, args=(stop, me.producer(topic, name), want), daemon=True)
               for topic, producers in LOAD.items() for name, want in producers]
    threads += [threading.Thread(target=_offload, args=(stop,), daemon=True),
                threading.Thread(target=_mutate, args=(stop,), daemon=True)]
    for t in threads:
        t.start()
    stop.wait(300)
    stop.set()
    for t in threads:
        t.join(timeout=2)
    me.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

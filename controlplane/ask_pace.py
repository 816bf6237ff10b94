"""How often the control plane wants each shared limit asked: its process's budget of grant asks, shared out.

How it works and why
--------------------
A shared limit's participants ask for grants as their chunks run out, and ``controlplane.grants`` sizes the
chunks so that a limit's asks stay near ``per_limit_per_s`` however many participants share it: each asker's asks
come ``askers / per_limit_per_s`` apart, its chunks and its retries after a short answer are sized by that spacing,
and a limit held at its ceiling draws about ``per_limit_per_s`` asks a second.

With ``MAX_ASKS_PER_S`` (100) for every limit, the asks grow with the number of limits held at their ceilings,
not with the participants: 50 limits of 20 busy participants each made 5,000 asks a second, more than one
process's core answers (measured: reports answered seconds late, a fifth of them within 5 s). So the process
holds a budget, ``budget_per_s`` asks a second over all its limits, and shares it out between the limits asked
for tokens in the last ``ACTIVE_S``: ``per_limit_per_s = min(MAX_ASKS_PER_S, budget_per_s / active)``. Worked
example, the default budget of 2,000: up to 20 busy limits, nothing changes; 25 limits of 20 participants get 80
a second each (each participant asks every 0.25 s instead of every 0.2 s); 50 of 20 get 40 (every 0.5 s), and
the process answers 2,000 asks a second instead of 5,000.

The grant book keeps a stretched limit used (``controlplane.grants``: spacings a whole part of the period, buckets
of two spacings) and stops stretching at ``ASKS_A_PERIOD`` (2) asks a period from each busy participant: asked once
a period, a participant whose ask came a moment early found its own last grant still in the window and waited a
whole period. The control plane's asks a second then stay near ``max(budget_per_s, 2 * busy participants / period)``
(a give-back, a micro-batch worker's early retry come on top): 1,000 participants busy on limits of one second make
2,000 whatever the budget.

The count is this process's own (replicas each count the limits they are asked about, and each keeps its own budget:
what each can answer). It is refreshed at most every ``RECOUNT_S``, so an ask costs a dict write. An operator sees
the three on ``/metrics`` (``throttlescope_grant_busy_limits``, ``_asks_per_limit``, ``_asks_budget``) and in the
Grafana dashboard: a limit asked less than 100 times a second is one whose participants ask further apart.
"""

from __future__ import annotations

import threading

from limiter.checks import finite
from protocol import MAX_ASKS_PER_S

__all__ = ["AskPace", "ASKS_BUDGET_PER_S", "ACTIVE_S", "RECOUNT_S"]

ASKS_BUDGET_PER_S = 2000.0   # a process's grant asks a second, over all its limits (about half a core here)
ACTIVE_S = 1.0               # a limit asked for tokens this recently takes a part of the budget
RECOUNT_S = 0.1


class AskPace:
    """The asks a second each busy limit gets of ``budget_per_s``. Thread-safe."""

    def __init__(self, budget_per_s: float = ASKS_BUDGET_PER_S):
        finite("budget_per_s", budget_per_s, unit="asks a second")
        if budget_per_s < MAX_ASKS_PER_S:
            raise ValueError(f"budget_per_s must be at least {MAX_ASKS_PER_S:g} asks a second (one busy limit's), "
                             f"got {budget_per_s!r}")
        self.budget_per_s = float(budget_per_s)
        self._asked_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._counted_at = -ACTIVE_S
        self._active = 0

    def asked(self, key: str, now: float) -> None:
        """The limit ``key`` was asked for tokens at ``now``."""
        with self._lock:
            self._asked_at[key] = now

    def active(self, now: float) -> int:
        """How many limits were asked for tokens in the last ``ACTIVE_S`` (counted at most every ``RECOUNT_S``)."""
        with self._lock:
            if now - self._counted_at >= RECOUNT_S or now < self._counted_at:
                since = now - ACTIVE_S
                self._asked_at = {key: at for key, at in self._asked_at.items() if at > since}
                self._counted_at, self._active = now, len(self._asked_at)
            return self._active

    def per_limit_per_s(self, now: float) -> float:
        """The asks a second one busy limit gets now: its part of the budget, at most ``MAX_ASKS_PER_S``."""
        return min(MAX_ASKS_PER_S, self.budget_per_s / max(1, self.active(now)))

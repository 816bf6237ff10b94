"""What the holders of a shared limit spent, and when: the bound on any window of *consumption*.

Why
---
``limiter.grants.GrantWindow`` counts tokens when they are granted: no window of ``window_s`` holds more grants
than the limit. Consumption follows the grants, but not at once: a token granted at 0.3 s and spent at 1.1 s (a
Spark worker held it through the gap between two micro-batches, or overdrew its pool by one acquire and repaid
it later) slides out of the grants' window at 1.3 s, while it was spent in the window (1.1, 2.1]. That window
may then hold the limit plus all that was held through the gap: measured, 1.15-1.2x the limit in the first second
of each micro-batch of a 2-worker stream.

How
---
A holder that reports says, with each ask, what it holds (``held``: its pool's balance after any give-back) and
what it spent since its last report, and when (its participant looks at its pools every few milliseconds, and
dates a spend at or after it: by its pool's newest send, or the look that saw it). ``SpentWindow`` keeps

- the spends of the last ``window_s``, in time order, and
- per *idle* reporting holder (one that spent nothing since its report before: its tokens may be held through a
  gap and spent at once), what it holds: what it held when it reported, and what it was granted since. A holder
  that spends as it goes reports its stock as spends within moments; counting its stock as held as well would
  count each steady holder's working stock twice over (measured: the limit short by a chunk per holder);
- per *bursting* reporting holder (``granted(..., bursts=True)``: a micro-batch worker drawing the catch-up of
  its return, a chunk an ask, each spent at once), what it was granted since its last report, although it spends
  as it goes. Counted only once its next ask told them as spends, a chunk it had just got was in no bound when
  another worker asked a moment later: both spent their grants in the same instant, and the second after the
  last micro-batch's late spends held 1.075-1.125x the limit (a 2-worker stream on a 2-executor cluster, 5 runs
  of 16; none of 16 since). A steady holder's chunks are not counted so: they are spent over the time to its
  next ask, and counting them stopped two steady holders' shares from settling (70/30 -> 50/50 swung 380-560
  around 500 for good).

``counted()`` is all three. A token spent in ``(t, t + window_s]`` is counted at ``t + window_s`` as a spend dated
after ``t``, or as held by an idle holder, or as granted to a bursting one, or -- the part not bounded -- it was
spent by a steady holder that has not reported it yet (what it spends between two asks). ``GrantWindow`` grants no
more than keeps ``counted()`` within the limit and ``HELD_SLACK`` of it, beside its own grant-time bound at the
limit itself: the long-run rate is the limit (the grants), and tokens held through a gap, or overdrawn by an
acquire, add at most ``HELD_SLACK`` of it (and a report's lag) to any window of consumption.

A bursting holder also runs up to a send ahead of its grant (``ahead``): its producers send while its pool holds
anything, each send charged whole, so a grant of 15.6 lets a send of 25 through, told only with the next report.
``GrantWindow.grant`` counts that part with its fresh grants when the worker says the send its producers make.

A reporting holder silent for a window is gone (it died, or moved to another control plane): what it held is
dropped.

A sole spender's debt (``excusable``; ``granted`` repays it). A producer sends when its pool holds anything and overdraws it by the rest
of the acquire (Pulsar's rule); the grants that repay the debt pay for a spend already counted, and enable no new
one. Counted against the bound all the same, they left a holder whose acquires are large beside the limit -- 100
messages a send at 150/s: every window held two sends, 200 against a bound of 157.5 -- waiting for the first to
slide out before it could repay the second: one send a second, 0.87 of the limit. When the holder is the window's
only spender (no other spends nor holds anything in it), its grants are bounded by its own bucket and the
window's grants (the limit per window), and its spends by those plus the one acquire it overdraws: a grant may
repay its debt beyond the bound. With other spenders it may not: every holder could then overdraw at once, and
the window hold one acquire per holder over the limit (measured, 1.2x a 1,000/s limit shared by four).

What repays a debt its holder told is not counted again (``granted``): it pays for the whole send the report told as
spent, and enables none. Counted as a bursting holder's fresh grant as well (or as an idle one's stock), it held the
bound over what had been sent by as much as the holders owed: at each micro-batch's end sixteen workers in debt (a
task's last send of 25 made on a few tokens) held it about 150 over, and their last sends waited on that (simulated,
keepers 40-80 ms apart: 0.943 of the limit over twelve seeds, 0.965 counted once).

Worked example, limit 1,000 per 1-s window: worker A was granted 150 at 0.3 s and reported holding them at 0.4 s
while idle (outstanding 150). Its task ends; the next starts at 1.1 s, spends the 150 at once and asks: they become
a spend dated 1.1 s, counted until 2.1 s, so the grants in (1.1, 2.1] get at most 900 (``HELD_SLACK`` 0.05: 1,050
less 150) -- counted at grant time alone, that second could have held 1,150.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable

from .checks import at_least_zero, finite, positive

__all__ = ["SpentWindow", "expire"]


def expire(last_seen: OrderedDict[Hashable, float], horizon: float) -> list[Hashable]:
    """Remove (and return) the holders of ``last_seen`` (oldest first) last seen at or before ``horizon``."""
    gone = []
    while last_seen:
        holder, at = next(iter(last_seen.items()))
        if at > horizon:
            break
        del last_seen[holder]
        gone.append(holder)
    return gone


class SpentWindow:
    """Spends in the last ``window_s`` and what reporting holders hold (see the module essay). Not thread-safe."""

    def __init__(self, window_s: float):
        self.window_s = float(positive("window_s", window_s, unit="seconds"))
        self._spends: deque[tuple[float, float, Hashable]] = deque()   # (when, amount, holder), oldest first
        self._spent = 0.0
        self._spent_by: dict[Hashable, float] = {}   # holder -> its spends in the window
        self._debts: dict[Hashable, float] = {}      # holder -> the debt it last reported (an overdrawn acquire)
        self._held: dict[Hashable, float] = {}
        self._held_total = 0.0
        self._fresh: dict[Hashable, float] = {}   # bursting holder -> granted since its last report
        self._fresh_total = 0.0
        self._reported: OrderedDict[Hashable, float] = OrderedDict()   # holder -> when it last reported, oldest first

    def __setstate__(self, state: dict[str, object]) -> None:
        # (a window kept by a version that did not count fresh grants: none counted until the next grant)
        self.__dict__.update({"_fresh": {}, "_fresh_total": 0.0})
        self.__dict__.update(state)

    def _slide(self, now_s: float) -> None:
        horizon = now_s - self.window_s
        while self._spends and self._spends[0][0] <= horizon:
            _, amount, holder = self._spends.popleft()
            self._spent -= amount
            left = self._spent_by.get(holder, 0.0) - amount
            if left <= 1e-9:
                self._spent_by.pop(holder, None)
            else:
                self._spent_by[holder] = left
        if not self._spends:
            self._spent = 0.0   # no float dust
            self._spent_by.clear()
        for holder in expire(self._reported, horizon):
            self._set_held(holder, None)
            self._set_fresh(holder, 0.0)
            self._debts.pop(holder, None)

    def _set_held(self, holder: Hashable, amount: float | None) -> None:
        self._held_total += (amount or 0.0) - self._held.get(holder, 0.0)
        if amount is None:
            self._held.pop(holder, None)
        else:
            self._held[holder] = amount
        if not self._held:
            self._held_total = 0.0

    def _set_fresh(self, holder: Hashable, amount: float) -> None:
        self._fresh_total += amount - self._fresh.get(holder, 0.0)
        if amount > 0:
            self._fresh[holder] = amount
        else:
            self._fresh.pop(holder, None)
        if not self._fresh:
            self._fresh_total = 0.0

    def report(self, holder: Hashable, held: float, spent: Iterable[tuple[float, float]], now_s: float) -> None:
        """``holder`` holds ``held`` tokens now (negative: a debt, counted as 0) and spent ``spent``
        (``(when_s, amount)``) since its last report."""
        finite("held", held, unit="tokens")
        self._slide(now_s)
        spends, spent_now = self._spends, 0.0
        for at_s, amount in spent:
            at_least_zero("a spend", amount, unit="tokens")
            at_s = min(now_s, at_s)
            spent_now += amount
            if amount <= 0 or at_s <= now_s - self.window_s:
                continue
            i = len(spends)   # in time order: a report's spends are at most a few entries older than the newest
            while i and spends[i - 1][0] > at_s:
                i -= 1
            spends.insert(i, (at_s, amount, holder))
            self._spent += amount
            self._spent_by[holder] = self._spent_by.get(holder, 0.0) + amount
        # a holder that spends as it goes (it reported spends) reports its stock as spends within moments: counted
        # then; one that spent nothing since its last report may hold it through a gap, and spend it at once
        self._set_held(holder, max(0.0, float(held)) if spent_now <= 0 else None)
        self._set_fresh(holder, 0.0)   # (what it was granted before: in these spends, or in its stock)
        if held < 0:
            self._debts[holder] = -float(held)
        else:
            self._debts.pop(holder, None)
        self._reported[holder] = now_s
        self._reported.move_to_end(holder)

    def granted(self, holder: Hashable, amount: float, *, bursts: bool = False) -> None:
        """``holder`` was granted ``amount``: if it is an idle reporting holder, held until its next report; with
        ``bursts`` (a micro-batch worker drawing its catch-up: it spends each grant at once), counted until its next
        report even while it spends as it goes. What repays its debt is no longer owed, and is counted already: it
        pays for a spend its report told (the whole send that overdrew), and enables none."""
        debt = self._debts.get(holder, 0.0)
        new = amount - min(amount, debt)
        if holder in self._held:
            self._set_held(holder, self._held[holder] + new)
        elif bursts and holder in self._reported:
            self._set_fresh(holder, self._fresh.get(holder, 0.0) + new)
        if debt > 0:
            if debt - amount <= 1e-9:
                del self._debts[holder]
            else:
                self._debts[holder] = debt - amount

    def ahead(self, holder: Hashable, amount: float) -> None:
        """``holder``, a bursting reporting holder, will spend ``amount`` beyond what it holds at once (its next send
        overdraws its pool): counted with its fresh grants, until its next report."""
        if amount > 0 and holder in self._reported:
            self._set_fresh(holder, self._fresh.get(holder, 0.0) + amount)

    def excusable(self, holder: Hashable, now_s: float) -> float:
        """How much of ``holder``'s debt a grant may repay beyond the bound: all of it while ``holder`` is the
        window's only spender, else nothing (see the module essay)."""
        debt = self._debts.get(holder, 0.0)
        if debt <= 0:
            return 0.0
        self._slide(now_s)
        others = ((self._spent - self._spent_by.get(holder, 0.0)) + (self._held_total - self._held.get(holder, 0.0))
                  + (self._fresh_total - self._fresh.get(holder, 0.0)))
        return debt if others <= 1e-9 else 0.0

    def counted(self, now_s: float) -> float:
        """Spent in the window ending now, held by idle holders, and granted to bursting ones since they reported."""
        self._slide(now_s)
        return max(0.0, self._spent + self._held_total + self._fresh_total)

    def frees_s(self, bound: float, now_s: float, pending: float) -> float:
        """Seconds until ``counted()`` leaves room for ``pending`` under ``bound`` as spends slide out (0 if it does
        now; ``window_s`` if only a report can: what is held, or granted to a bursting holder, stays until then)."""
        excess = self.counted(now_s) + pending - bound
        if excess <= 0:
            return 0.0
        for at_s, amount, _ in self._spends:
            excess -= amount
            if excess <= 1e-9:
                return max(0.0, at_s + self.window_s - now_s)
        return self.window_s

    def spent_by(self, holder: Hashable, now_s: float) -> float:
        """What ``holder`` reported spent in the window ending now."""
        self._slide(now_s)
        return self._spent_by.get(holder, 0.0)

    def held(self, holder: Hashable) -> float:
        return self._held.get(holder, 0.0)

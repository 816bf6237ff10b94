"""Token grants: one shared limit handed out in small chunks, never more than the limit in any window.

How it works and why
--------------------
A shared limit (a tenant, a topic spanning many Spark workers, a resource group) is enforced by local token
buckets, one per participant, so the hot path never waits on the network. The question is how the tokens get
into them. Spark moves demand from one Python worker to another at every micro-batch and every task, and leaves
gaps between micro-batches: a rate split between participants strands quota on the worker that just went idle,
and a gap is lost for good (a rate cannot spend the second that passed idle). A central exact limiter (a moving
window on Redis) does neither, at one network round trip per acquire.

``GrantWindow`` gives the moving window's guarantee to *grants* instead of acquires:

    the tokens granted in any window of ``window_s`` (the limit's period) never add up to more than the limit,

but for the debts of sends already made, granted when a micro-batch worker leaves (``repay``, below): a window
over the limit by them grants nothing more until they slide out.

A participant asks for a chunk when its local bucket runs low, saying how fast it wants to spend
(``rate_per_s``), and gets ``grant(...)``: at most what it ``wants`` and its ``fair_chunk``, and no more than
these hold:

- the window: what is left of the limit in the last ``window_s`` (the hard bound above);
- the holder's own bucket: refills at its max-min fair share of the limit by the rates the askers want
  (``fair_rate``: raise a water level until the limit is shared out; who wants less gets what it wants, the others
  the same larger share; spare is split in ``n + 1`` parts, one kept free for a newcomer) and holds ``burst_s`` of
  it -- so grants flow smoothly at the fair rates, which add up to the limit, and a gap is caught up by at most
  ``burst_s``; a holder that gave back and asks again within a window (its next task, after Spark's 0.2-0.9 s
  between two micro-batches) holds up to a window of it, so that gap is caught up whole (and keeps it through the
  asks it takes to draw it, a chunk each). It does not refill while the window is spent, or what the window held
  back would come out as a burst when it slides, and echo every window: steady holders whose shares move
  (70/30 -> 50/50) would swing around them for as long as the echo lasts. (A window spent for less than
  ``SHORT_SPENT_S`` of it is not oversubscribed: holders asking at their fair rates fill it exactly, and the grant
  a window ago slides out a little after an ask now and then; pausing for that would lose the refill of every
  such moment. Holders asked only every ``asks_apart_s``, as a control plane keeping to its budget of asks spaces
  them, fill it at that spacing: a window spent for no longer does not pause them either, and each holds up to
  twice the spacing of its share, so that an answer that came late or found the window full is made up by the
  next -- with a stock of 0.5 s, 20 holders a limit asked once a second took 0.56 of it.)
  Except a holder back from a gap of ``RETURN_GAP_S`` or more within ``RETURNING_WINDOWS`` windows that spent some
  of its grants before the gap (a micro-batch worker; not a batch job's, back from one short task to the next at
  once, nor a participant that asked ahead of any work and gave it all back -- steady from then on, three such
  echoed their first catch-up for ten windows and read 0.81 of their fair shares in a second, each grabbing
  what the window freed in a different order): for it the echo is the point. Its
  catch-up at the start of a micro-batch fills the window early, so the window is spent for as long as the gap
  was, just before the catch-up slides out; refilling through that pause, it sends the same burst again when it
  slides out, and the pause recurs every window -- the sliding window's best pattern under gaps: each window holds
  the whole limit. A micro-batch of whole windows' worth then ends where a pause starts, and Spark's next gap
  falls into it at no cost (one that ends elsewhere finds the window with room and its bucket refilled, and
  catches up again). Without it the pause came once, the gap after it was lost, and a 2,000-row micro-batch stream
  at 1,000/s read 0.94-0.97 of its limit; with it 0.98-0.99.
  And such a worker is not held to its bucket at all while the window has room that no other holder was just
  answered short of: it takes that room, as an exact moving window lets a sender after a pause -- the lump that
  starts the echo. What another holder was answered short of by the window or the spends (not by its own
  bucket) in the last ``OWED_S`` of the window stays out of that room (``_owed_to_others``): where holders that
  both want more contend, their buckets pace them and their fair shares stand. Held to its bucket, a greedy
  micro-batch job beside a trickle caught up less than its gap left whenever the trickle's burst claimed its
  share for a moment (its bucket refilled at half the limit then): simulated, 0.927 of the limit against an
  exact window's 0.996; 0.941 with this.
  A worker away for longer than a window is such a worker too, if it gave back having sent (``_left``, kept
  ``RETURNING_WINDOWS`` windows): its bucket is a newcomer's, but it takes the window's room and its debt is repaid
  when it leaves. Sixteen workers of a stream whose period is longer than a window (a driver that commits each
  micro-batch in 0.3 s; a busy host) each ran a task of a few tenths of a second in it, and came back as
  newcomers: each repaid the last task's debt (a last send of 25 on a few tokens) with its next task's first
  grants, the window full of those repayments when the micro-batch's last sends came, and they waited 0.3-0.4 s
  for its first grants to slide out.
- the spends (holders that ``report``, below): what they spent in the window and what idle ones hold, within
  the limit and ``HELD_SLACK`` of it.

A small holder beside a hungry micro-batch worker waits a moment (``_defers``). A micro-batch worker's gaps are
where a limit goes unused: the room that slides out while it is away goes to no one, unless another holder has a
backlog to send then. A small holder -- one that asked for a window or more, was granted at most ``SMALL_SHARE`` of
what such a worker was in the window, and said it wants less than the limit within ``SAID_LESS_WINDOWS`` windows (a
trickle: a second job of the tenant sending a batch a second) -- that asks while the worker was just answered short
of its due gets nothing for up to ``DEFER_S`` of the window, and is owed nothing meanwhile, so the worker takes the
room as it frees; then it is served as any holder, and not kept waiting again for as long. Its batch goes in the
worker's next gap, or after the wait: served at once, its bursts took room the greedy worker would have sent in, and
Spark's gaps left the room that slid out unused. Worked example, limit 1,000: a greedy micro-batch job of two
500-row tasks a micro-batch and Spark's gaps of 0.1-0.3 s, beside a trickle of four sends of 25 a second (simulated,
four seeds): 0.954 of the limit with the trickle served at once, its sends waiting 183 ms on average; 0.977 with it
waiting up to 0.45 s (247 ms on average: the greedy job's next gap comes sooner, most times). A new holder is served
at once (a second greedy job joining is small for its first moments), and so is one beside steady holders only:
their gaps do not recur, and the wait would cost the small holder without filling one.

A grant that takes room which came free as an older grant slid out is *dated* when the room came free, if that was
at most ``DATED_BACK_S`` of the window before the ask and not before the newest grant's date (``_dated``) -- part by
part: what it takes of the room each older grant left is dated when that grant slid out. The keepers ask every 20
ms, so freed room waits up to a beat for the next ask; dated at the ask, each token's round took the window plus
that lag, and a stream whose grants the window held read 0.985-0.993 of its limit (a micro-batch stream asking at
the keeper's beat, simulated: 0.996; dated back, 1.0). Dated whole, at the moment the grant as a whole fitted, an
ask that took the room of several grants sliding out (a micro-batch's lump sliding out faster than the asks come)
dated the older ones' tokens at the newest one's moment, and they took the window and the gap between them every
round: the 4-task stream read 0.9966 of its limit, the stream of half-limit micro-batches 0.9943 (0.9982 and 0.9974
dated part by part, three runs each, 2026-12-01). Dated so, each part fits every window that holds the moment it is
dated (the room only grew since), so the rule above holds for the dated grants. Room that was there before (no grant
the window held) or came from a give-back is dated at the ask. A give-back of nothing (a task that ended with its
pool spent: two a micro-batch on a 2-worker stream) changes no room, and dates nothing later; an earlier version let
any give-back stop the dating of room freed before it, and the 4-task stream read 0.995 of its limit (0.9965 since,
three runs each).
But a grant dated back is sent when it is made: a window of sends that starts between the two holds it, and the
grant that takes its room a window after the room came free as well -- the limit and all that was dated back across
the window's start, where the next round's ask came sooner than this one's. So the grants are counted where they
were made too (``_made_room``): those made in any window, dated back or not, hold at most the limit and
``MADE_SLACK`` of it, as the spends' slack (below). Worked example, limit 100: 100 granted at 0.0 s; its room comes
free at 1.0 s and an ask at 1.02 s takes it, dated 1.0 s; the room comes free again at 2.0 s, and an ask then gets
5, not 100 -- the window (1.02, 2.02] of sends holds the 100 sent at 1.02 s -- and the rest from 2.02 s on. Without
it, the two applications' simulation (``tests/collectors``: a stream beside a trickle) let 1,100 through in a second
of 1,000 in one seed of fourteen, an ask's 125 dated 30 ms back and their room taken again on time; with it no
second held more than 1,050 plus one send, in all fourteen, at the same use of the limit (0.957 of it on average
over them, 0.957 dated whole).
A micro-batch worker's grants are dated back up to ``WORKER_DATED_BACK_S`` of the window, not an ask's lag: its
grants come a debt behind its sends. It sends while its pool holds a token, and the send overdraws the rest; the
grants that repay that debt come with its next asks, and where the window is full, only as room frees. Dated at
those asks, they held the window full while the sends of its last second left room for a send more, and both
workers of a stream waited: at 300 msgs/s, sends of 25 (8 % of it) and micro-batches of 1,000 rows in two tasks,
0.988 of the limit against an exact window's 1.000 (simulated, sixteen seeds of 30 s; 0.985-0.988 wherever a
micro-batch's sends last a fraction of windows, 0.996-1.0 where they last whole ones). Dated back to when the room
came free, up to half a window: 0.995, the worst second unchanged (the limit and two sends). What is dated back
across a window's start is sent in it: the made grants' bound holds such a window at the limit and ``MADE_SLACK``
(a lone worker's micro-batch stream at 1,000/s reached 1,050 in 0.9 of a window so, against 1,000 dated back no
further than an ask's lag; both 1,050 in a whole window). Steady holders keep the short lag: room that slid out
echoed between them, dated back so far, and a 70/30 -> 50/50 shift settled in 11 intervals instead of 3.

Its producers then spend the chunk locally. What it did not spend when it goes idle it gives back (``give_back``),
and the window credits it to its newest grants, so the next worker to get work finds it. A micro-batch worker
that leaves in debt (its last send overdrew its pool by part of a send) is granted the debt at once, even beyond
the limit (``repay``, from the control plane's answer): those tokens were spent, and granted with its next task
instead they counted a micro-batch late, the window full while the sends it had seen left room for one more -- and
full of them, that micro-batch's own last sends overdrew in turn, a debt handed on every micro-batch.

Worked example, limit 1,000 per 1-s window, ``burst_s`` 0.5. Worker A starts a micro-batch wanting 1,000/s, alone:
its fair rate is 1,000/s, and its first asks drain its bucket's 500 at once (catching up the gap before the
batch), then it gets 1,000/s. Worker B joins wanting 1,000/s too: both fair rates become 500/s, and each own bucket
paces its holder to that. A's task ends with 120 tokens unspent: it gives them back, B's fair rate becomes
1,000/s and the 120 are free at once. A micro-batch stream with 0.3-s gaps thus still gets its 1,000 each second
(the gap is caught up from the buckets), and no window ever holds more than 1,000 granted.

Consistency: consumption follows grants, but not at once -- a worker may hold a chunk through Spark's gap
between two micro-batches, or overdraw its pool by one acquire and repay it with its next chunk -- so a window of
consumption could hold the limit plus what was held at its start. Holders that ``report`` what they hold and
what they spent, and when, close that gap: ``limiter.spent.SpentWindow`` counts their tokens as held until spent
and then from when they were spent, and a grant must fit both bounds: the grants of the window within the
limit (so the long-run rate is the limit), and the window's spends plus what is held within the limit and
``HELD_SLACK`` of it (so a burst of held tokens adds at most that to any window of consumption) -- except what
repays the debt of the window's only spender, which pays for a spend already counted (``limiter.spent``). A
micro-batch worker's grants count there from when they are granted until its next report (it spends each chunk of
its catch-up at once, and another worker may ask in between). A holder that does not report is bounded by its
grants alone.

A send runs ahead of its grant: a producer sends while its pool holds anything, each send charged whole, so a pool
granted 15.6 tokens sends the 25 its producer waits with and owes 9.4, told only with its next ask. Sixteen
micro-batch workers (fair chunks of 15.6, sends of 25) did so at once at each micro-batch's start, and the second
that held it read 1.14-1.2x the limit (simulated, and on the benchmark's 16-worker stream). A micro-batch worker
that says the send its producers make (``send``: the one a producer waits to make, else the largest of the last few
that waited -- a task's first ask comes before its first refusal, and told nothing there, sixteen workers whose
keepers asked 20-80 ms apart, as on two busy cores, went over 1.075x in four seeds of 36, up to 1.088x; told the
last that waited alone, the remainder that ended the task before, 12 where the next task sends 25, up to 1.088x
again once what repays a debt was counted once: ``limiter.spent``) and what it holds (``balance``) has the part that
will run ahead counted with its fresh grants at once (``SpentWindow.ahead``), until its next report tells the sends:
the next asker gets that much less (simulated: 1.05-1.075x). Worked example, limit 1,000: a micro-batch worker
holding nothing is granted 190 for sends of 25 -- it sends eight, 200, 10 ahead; the worker that asks next gets 10
less than the spends' bound let it before. Not grants in whole sends (190 -> 200 here, or nothing where not one
fits, as an exact limiter's acquire waits): the window held as well (1.05-1.075x simulated), but the last sends of
each micro-batch waited for room for all of theirs, and the stream used 1-4 points less of its limit on the
benchmark. One whose producers say what they have in hand (``coming``: a batch cut into sends) runs ahead of its
grant by no more than that: granted 62 for a task of 62 in sends of 25, 25 and 12, nothing runs ahead; and one
that says it has nothing more in hand (``coming`` 0: all its batch is charged) runs nothing ahead. Only one that says
nothing (``coming`` None) is taken to make a whole send: a task's last ask, a token to tell its spends, once counted
a send of 25 ahead until its give-back, 23 times in three runs of the 4-task stream.

``learning_cap``: after a control-plane restart the table knows nothing of the tokens the participants are
spending on the old process's grants or their fallback rates; until everyone has been heard from, a holder gets
no more per window than the fallback rate it reports (see ``controlplane.grants``), and its own bucket refills at
no more than that rate and starts empty, nor catches up a gap when it comes back: it was spending at that rate
until this ask, so a first burst would come on top of a window's worth already spent (two holders at 500/s of
1,000 that come back would otherwise take 500 each at once, 2,000 in the second around the restart).

``fell_back``: a participant whose asks fail spends its pool, then runs at its fallback rate, and no grant counts
those spends (a replica failing fast while its shared store is back, a control plane that stalls). Its ask after
that says so, and the holder is paced from its return, its bucket empty: what it held when it left and the refill
since would come on top of what it spent meanwhile. Worked example: two holders at 500/s each, one whose asks
failed for 0.7 s (0.2 s of it at its 500/s fallback) -- with the refill it spent about 650 in a second, without it
500. A holder that only stalled (no fallback) still catches up its gap.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from itertools import chain, islice

from .checks import at_least_zero, positive
from .spent import SpentWindow, expire

__all__ = ["GrantWindow", "DEFAULT_BURST_S", "HELD_SLACK", "MADE_SLACK", "SHORT_SPENT_S", "DEFER_S"]

# a holder that never stopped asking holds this much of its fair rate (a whole window slowed a change of the fair
# shares: the 70/30 -> 50/50 shift took 7-11 intervals instead of 2); one back from a gap holds up to a window
DEFAULT_BURST_S = 0.5
# of the limit: how far the spends plus what idle holders hold may go over it (see the essay). At 0.1 a publish job's
# batch, its tasks ending with stock left in their pools, read 1.175x the limit in a second (1,100 plus a short
# acquire); at 0.05, 1.1 (the limit plus one acquire), and the simulated 70/30 -> 50/50 shift still settles in 2
# intervals (demand that moves between steady holders draws on their working stocks: an earlier version, which
# counted no spends, never settled at 0.05)
HELD_SLACK = 0.05
# of the limit: how far the grants *made* in any window, dated back or not, may go over it (``_made_room``: a grant
# dated back is sent when it is made). As much as HELD_SLACK, but a knob of its own: the two bounds hold different
# seconds. Tightened apart to 0.02 (ours alone on the 16-worker stream, local[2], three runs each), the made grants'
# left its worst second at 1.074 of the limit, as at 0.05, the spends' took it to 1.041
MADE_SLACK = 0.05
LEVEL_REFRESH_S = 0.05
WANTS_CHANGE = 0.05     # a holder's wanted rate moved by more than this part: the fair level is worked out again
SHORT_SPENT_S = 0.05    # of the window: a spent window that frees sooner does not pause the holders' buckets
RECENT_WINDOWS = 5      # ``holders``: who asked in this many windows (the safe split's count)
# a holder back from a gap within this many windows is a micro-batch worker: its bucket refills while the window is
# spent (see the essay). Spark's next gap is due within a micro-batch, and a micro-batch of up to this many
# windows' worth keeps the pause its catch-up left until that gap falls into it (6-s micro-batches: 0.96 -> 0.99)
RETURNING_WINDOWS = 10
# of the window: away at least this long is one of Spark's gaps between micro-batches (0.15-0.9 s). A batch job's
# worker is back from one short task to the next within milliseconds: it has no gap to catch up, and echoing its
# bursts read 1.1-1.25x the limit in a second
RETURN_GAP_S = 0.1
# of the window: how far before the ask a grant of room that came free may be dated (see the essay). The keepers
# ask every 20 ms; the room a grant leaves when it slides out waits for the next ask, and dated at that ask each
# token's round came back a poll's lag late every window (the streams read 0.985-0.993 of the limit)
DATED_BACK_S = 0.03
# of the window: the same for a micro-batch worker (``returning``, or one that left having sent), whose grants come
# a debt behind its sends as well (see the essay): a 2-worker stream at 300/s whose micro-batches take 3.3 windows
# read 0.988 of its limit dated back 0.03 of the window, 0.995 at 0.5 (simulated, sixteen seeds). Not for steady
# holders: dated back so far, the room that slid out echoed between them, and a 70/30 -> 50/50 shift took 11
# intervals to settle instead of 3
WORKER_DATED_BACK_S = 0.5
# of the window: what a holder was answered short of (by the window or the spends) this recently stays out of the
# room a micro-batch worker may take beyond its bucket (two greedy micro-batch jobs of one limit, simulated: 65/35
# without it, 55/45 with it -- as with their buckets alone)
OWED_S = 0.05
# a small holder beside a hungry micro-batch worker waits at most this part of the window for its grant (see the
# essay: its sends fill the worker's next gap); "small": granted at most SMALL_SHARE of what that worker was in the
# window. Two applications simulated (a greedy micro-batch job beside a trickle, four seeds): 0.954 of the limit
# served at once, 0.969 waiting up to 0.2 of the window, 0.971 at 0.3, 0.977 at 0.45 and at 0.6; on the benchmark
# 0.963 at 0.3 and 0.971 at 0.45 (the trickle's batches waiting 156 and 200 ms for the limiter; 132 served at once)
DEFER_S = 0.45
SMALL_SHARE = 0.25
HUNGRY_LOOKED_AT = 16
# "small" too: it said it wants less than the limit within this many windows (a waiting pool says the whole limit).
# A trickle that turned greedy says the whole limit at every ask, and is served as any holder once that is all it
# said for this long; small by its grants alone, it was held at each micro-batch for seconds after it grew, as the
# wait kept its grants small (simulated: 366 a second against 462 in the 8 s after it grew, in one seed of three)
SAID_LESS_WINDOWS = 2
# of the limit: a send up to this size that a micro-batch worker's grant leaves running ahead of it is counted at
# once (see the essay). A larger one is not: a holder of sends that large beside its limit (100 at 300/s) is the
# window's only spender, whose debt is repaid beyond the bound (``limiter.spent``), and counting it ahead as well
# would hold its next grant back by most of a send
SEND_AHEAD_SHARE = 0.05


def _water_level(capacity: float, wants: list[float]) -> tuple[float, float]:
    """(level, spare per part) of max-min fair sharing of ``capacity`` by sorted ``wants``."""
    n, total = len(wants), math.fsum(wants)
    if total <= capacity:
        return math.inf, (capacity - total) / (n + 1)
    left = capacity
    for k, w in enumerate(wants):
        if w * (n - k) >= left:
            return left / (n - k), 0.0
        left -= w
    return wants[-1], 0.0


def _amount(name: str, value: float) -> float:
    return float(at_least_zero(name, value, infinite_ok=True))


class GrantWindow:
    """The grants of one dimension of one shared limit (see the module essay). Not thread-safe: the caller
    serialises (the control plane answers on its event loop)."""

    def __init__(self, window_s: float = 1.0, burst_s: float = DEFAULT_BURST_S, *, catch_up: bool = True):
        positive("window_s", window_s, unit="seconds")
        if not (isinstance(burst_s, int | float) and math.isfinite(burst_s) and 0 < burst_s <= window_s):
            raise ValueError(f"burst_s must be a number of seconds > 0 and <= window_s, got {burst_s!r}")
        self.window_s, self.burst_s = float(window_s), float(burst_s)
        # a holder back from a gap catches it up (see ``grant``); off for a sink that refuses bursts (an adaptive
        # limit: the catch-up of a micro-batch's first asks came to the sink at once, and it refused them), and
        # such a holder is paced from its return instead
        self.catch_up = bool(catch_up)
        self._spent_until = -math.inf            # the window is spent until then
        self._log: deque[list] = deque()        # [granted_at_s, holder, amount, made_at_s], oldest first
        # (when, amount, from a give-back) of the room that came in the last WORKER_DATED_BACK_S windows (the longer
        # of the two), oldest first: the entries that slid out (a grant may be dated back to when one did) and the
        # give-backs (room from one is dated at the ask); see ``_dated``. Each is added just after a slide at its own
        # moment, so in time order
        self._room_came: deque[tuple[float, float, bool]] = deque()
        # (made_at, amount) of grants dated back that slid out of the window while the moment they were made is
        # still in it, oldest first: what they let send is (``_made_room``)
        self._overhang: deque[tuple[float, float]] = deque()
        self._overhang_total = 0.0
        self._total = 0.0
        self._per: dict[Hashable, float] = {}     # holder -> granted to it in the window
        # holder -> when it last asked, oldest first (a re-ask moves it to the end): expiry pops from the front,
        # so an ask costs O(1) however many holders share the limit
        self._askers: OrderedDict[Hashable, float] = OrderedDict()
        self._wants_per_s: dict[Hashable, float] = {}          # holder -> how fast it wants to spend
        self._own: dict[Hashable, tuple[float, float]] = {}    # holder -> (its bucket's tokens, when)
        self._away: OrderedDict[Hashable, float] = OrderedDict()   # gave back, its bucket kept: holder -> when
        self._away_unsent: set[Hashable] = set()   # of those, the ones that gave back all they had been granted
        self._outstanding: dict[Hashable, float] = {}   # holder -> granted since it came (or came back), less returns
        self._level: tuple[float, float, float] | None = None  # (rate, water level, spare per part)
        self._level_at = -math.inf
        self._recent: OrderedDict[Hashable, float] = OrderedDict()   # the same, kept RECENT_WINDOWS windows
        self._returned: OrderedDict[Hashable, float] = OrderedDict()  # back from a gap: holder -> when, oldest first
        # gave back having sent some of its grants: holder -> when, oldest first, kept RETURNING_WINDOWS windows (one
        # away longer than a window comes back to a new bucket, but still as a micro-batch worker)
        self._left: OrderedDict[Hashable, float] = OrderedDict()
        self._spent = SpentWindow(self.window_s)   # reporting holders: their spends and what they hold
        # holder -> when its last answer fell short of its bucket's due, by the window or the spends, oldest first,
        # and by how much: kept OWED_S of the window (see ``_owed_to_others``)
        self._short_at: OrderedDict[Hashable, float] = OrderedDict()
        self._short_of: dict[Hashable, float] = {}
        self._short_total = 0.0   # (their sum: an ask's share of it is O(1) however many holders share the limit)
        self._first_seen: dict[Hashable, float] = {}   # holder -> its first ask (while in ``_recent``)
        self._deferred: dict[Hashable, float] = {}     # a small holder waiting (``_defers``) -> since when
        self._served: dict[Hashable, float] = {}       # a small holder's last wait ended (served) -> when
        # holder -> when it last said it wants less than the limit (while in ``_recent``, as ``_first_seen``)
        self._said_less: dict[Hashable, float] = {}

    def __setstate__(self, state: dict) -> None:
        # a window pickled by an earlier release (the replicas' state in Redis) lacks what was added since: a
        # fresh window's values fill it in
        fresh = GrantWindow(state["window_s"], state["burst_s"], catch_up=state.get("catch_up", True))
        self.__dict__.update({**fresh.__dict__, **state})
        for entry in self._log:   # (an entry kept before grants were dated back was made when it is dated)
            if len(entry) == 3:
                entry.append(entry[0])

    def _slide(self, now_s: float) -> None:
        horizon = now_s - self.window_s
        log = self._log
        while log and log[0][0] <= horizon:
            at, holder, amount, made = log.popleft()
            if amount > 0:
                self._room_came.append((at + self.window_s, amount, False))
                if made > horizon:
                    self._overhang.append((made, amount))
                    self._overhang_total += amount
            self._total -= amount
            left = self._per.get(holder, 0.0) - amount   # (a holder's credited entries may outlive its total)
            if left <= 1e-9:
                self._per.pop(holder, None)
            else:
                self._per[holder] = left
        if not log:
            self._total = 0.0   # no float dust left behind
            self._per.clear()
        over = self._overhang
        while over and over[0][0] <= horizon:
            self._overhang_total -= over.popleft()[1]
        if not over:
            self._overhang_total = 0.0
        came = self._room_came
        while came and came[0][0] <= now_s - max(DATED_BACK_S, WORKER_DATED_BACK_S) * self.window_s:
            came.popleft()
        for holder in expire(self._askers, horizon):
            self._wants_per_s.pop(holder, None)
            self._own.pop(holder, None)
            self._outstanding.pop(holder, None)
            self._deferred.pop(holder, None)
            self._served.pop(holder, None)
            self._level = None
        for holder in expire(self._away, horizon):   # away for a window: a newcomer when it comes back
            self._own.pop(holder, None)
            self._away_unsent.discard(holder)
        expire(self._returned, now_s - RETURNING_WINDOWS * self.window_s)
        expire(self._left, now_s - RETURNING_WINDOWS * self.window_s)

    def granted(self, now_s: float) -> float:
        """Tokens granted in the window ending now."""
        self._slide(now_s)
        return max(0.0, self._total)

    def granted_to(self, holder: Hashable, now_s: float, within_s: float | None = None) -> float:
        """Tokens granted to ``holder`` in the window (or in its last ``within_s`` seconds)."""
        self._slide(now_s)
        if within_s is None:
            return self._per.get(holder, 0.0)
        return math.fsum(e[2] for e in self._log if e[1] == holder and e[0] > now_s - within_s)

    def report(self, holder: Hashable, held: float, spent: Iterable[tuple[float, float]], now_s: float) -> None:
        """``holder`` holds ``held`` tokens after any give-back (negative: a debt) and spent ``spent``
        (``(when_s, amount)``) since its last report: its grants are bounded by when they are spent too
        (``limiter.spent``)."""
        self._spent.report(holder, held, spent, now_s)

    def asked(self, holder: Hashable) -> bool:
        """Whether ``holder`` asked in the window (as of the last slide)."""
        return holder in self._askers

    def askers(self, now_s: float) -> int:
        """How many holders asked in the window ending now."""
        self._slide(now_s)
        return len(self._askers)

    def holders(self, now_s: float) -> int:
        """How many holders asked in the last ``RECENT_WINDOWS`` windows and did not ``leave``: the count a safe
        (static) split must divide by. Askers in one window undercount a Spark stream, whose workers each sit
        out a micro-batch now and then: a split by them would let every worker run at more than its part while
        the control plane is down."""
        for gone in expire(self._recent, now_s - RECENT_WINDOWS * self.window_s):
            self._first_seen.pop(gone, None)
            self._said_less.pop(gone, None)
        return max(len(self._recent), self.askers(now_s))

    def micro_batch_workers(self, now_s: float) -> int:
        """How many holders came back from a gap within ``RETURNING_WINDOWS`` windows (``returning``): the workers
        of a stream whose period is longer than a window, most of which have not asked yet in this one."""
        self._slide(now_s)
        return len(self._returned)

    def leave(self, holder: Hashable) -> None:
        """``holder`` is gone for good (its participant said goodbye): no longer counted by ``holders``. Not for a
        holder between two tasks (``give_back``): it is back with the next one, and counts meanwhile."""
        self._recent.pop(holder, None)
        self._first_seen.pop(holder, None)
        self._said_less.pop(holder, None)
        self._left.pop(holder, None)

    def grant(self, holder: Hashable, wants: float, capacity: float, now_s: float, *, fair_chunk: float,
              rate_per_s: float | None = None, learning_cap: float | None = None, fell_back: bool = False,
              asks_apart_s: float = 0.0, send: float = 0.0, balance: float | None = None,
              coming: float | None = None
              ) -> float:
        """Grant ``holder`` up to ``wants`` tokens now (see the module essay); returns the amount.
        ``rate_per_s``: how fast the holder wants to spend (its share is max-min fair by these); ``fell_back``: it
        ran at its fallback rate since its last ask (nothing is refilled for that time); ``asks_apart_s``: how far
        apart the holders' asks come (a window spent for no longer is them filling it at their fair rates);
        ``send``, ``balance``: the send a micro-batch worker's producers make and what its pool holds (negative: a
        debt) -- what that send will run ahead of the grant counts at once (the module essay); ``coming``: the
        messages its producers have in hand to send (None: not known; 0: none), beyond which nothing runs ahead."""
        wants = _amount("wants", wants)
        _amount("capacity", capacity)
        self._slide(now_s)
        if holder not in self._recent:
            self._first_seen[holder] = now_s
        for seen in (self._askers, self._recent):
            seen[holder] = now_s
            seen.move_to_end(holder)
        rate = capacity / self.window_s
        if rate_per_s is not None:
            said = _amount("rate_per_s", rate_per_s)
            before = self._wants_per_s.get(holder)
            self._wants_per_s[holder] = said
            # the fair level is a sort of every asker's wanted rate: worked out again when a holder is new or
            # wants noticeably more or less, else at most every LEVEL_REFRESH_S (an ask is O(1) in the holders)
            if before is None or abs(said - before) > WANTS_CHANGE * max(said, before):
                self._level = None
            if said < rate * (1 - WANTS_CHANGE):
                self._said_less[holder] = now_s
        if learning_cap is None and not fell_back and self._defers(holder, wants, now_s):
            self._forget_short(holder)   # (it is owed nothing: a micro-batch worker may take the room meanwhile)
            return 0.0
        # the holder's own bucket: refills at its fair rate (max-min by what every asker wants per second) and
        # holds ``burst_s`` of it; it does not refill while the window was spent (what the window held back must
        # not come out as a burst when it slides, which would echo the burst every window)
        fair_per_s = self.fair_rate(holder, rate, now_s)
        if learning_cap is not None:   # re-learning: paced at no more than the fallback rate, and no first burst
            fair_per_s = min(fair_per_s, learning_cap / self.window_s)
        # one back from a gap (it gave back, and asks again within a window) catches up to a window of it: Spark's
        # gaps between micro-batches run 0.2-0.9 s, and half a window left a 2-worker stream at 0.90-0.95 of its
        # limit. One that never stopped keeps ``burst_s``: a larger stock there slows a fair share's change
        # (not while re-learning: it was spending its fallback rate until its first ask, and a catch-up would come
        # on top of that -- measured, 466 at once after a micro-batch's gap, 1.35-1.65x the limit in that second)
        away_since = self._away.pop(holder, None)
        left_at = self._left.pop(holder, None)
        back = away_since is not None and learning_cap is None and self.catch_up
        sent_before = holder not in self._away_unsent
        self._away_unsent.discard(holder)
        # a micro-batch worker away for longer than a window (Spark's period past a window: a driver that commits
        # each micro-batch, a busy host; a task of a few tenths of a second in it) is one all the same: its bucket
        # is a newcomer's, but it takes the window's room and its debt is repaid when it leaves. Taken for a
        # newcomer, it repaid each task's debt with its next task's first grants, the window full of them as the
        # micro-batch's last sends came: each waited 0.3-0.4 s for its first grants to slide out
        long_back = away_since is None and left_at is not None and learning_cap is None and self.catch_up and \
            not fell_back
        if (back and sent_before and now_s - away_since >= RETURN_GAP_S * self.window_s) or long_back:
            self._returned[holder] = now_s
            self._returned.move_to_end(holder)
        # one asked only every ``asks_apart_s`` (the control plane stretched its limit's asks to keep to its budget)
        # holds twice that of its fair rate: its spends until the next answer, and as much again for an answer that
        # came late or found the window full (a stock of burst_s, 0.5 s, asked every second: 0.56 of the limit)
        own_most = fair_per_s * (self.window_s if back else min(self.window_s, max(self.burst_s, 2 * asks_apart_s)))
        held = self._own.get(holder)
        if held is None:
            own = 0.0 if learning_cap is not None else fair_per_s * self.burst_s
        else:
            returned = holder in self._returned
            # (a micro-batch worker's refill goes on: the pause its catch-up left must echo to Spark's next gap)
            since = held[1] if returned else max(held[1], self._spent_until)
            own = min(own_most, held[0] + max(0.0, now_s - since) * fair_per_s)
            if returned:
                # a micro-batch worker keeps the catch-up its return allowed (up to a window) through the asks it
                # takes to draw it, a chunk each: cut to burst_s after the first, it ended early, the micro-batch's
                # last rows waited for the window to slide, and Spark's next gap came on top of that wait
                own = max(own, min(held[0], fair_per_s * self.window_s))
            if back:
                # at least what it would have refilled while away, up to a full bucket (a newcomer's): its next task
                # starts at once on it, although its refill paused while the window was spent. Only what it was
                # away for: a batch job's worker is back from one short task to the next within milliseconds, and
                # a full bucket for each task let 64 short tasks spend 1.3x the limit in a second
                own = max(own, fair_per_s * min(self.burst_s, now_s - away_since))
            elif away_since is not None and not self.catch_up:
                # back, and no catch-up (a sink that refuses bursts): paced from now, nothing refilled while away.
                # The sink refilled its own burst while no one sent, but only that, and it was spent when the gap
                # began; every holder's refill on top came to it at once (measured: about a refusal a micro-batch)
                own = min(own, held[0])
        if fell_back:
            # it ran at its fallback rate since its last ask (its asks failed: a replica failing fast while its
            # shared store was back), which no grant counts: what its bucket held when it left, and the refill
            # since, came on top of those spends (six holders' half-second stocks at once: 1.15x the limit in a
            # second). Paced from its return, from empty -- a newcomer's stock neither
            own = 0.0
        # (a sole spender's debt is repaid beyond the spends' bound: it pays for a spend already counted)
        spent_room = self._spends_bound(holder, capacity, now_s) - self._spent.counted(now_s)
        fair_chunk = _amount("fair_chunk", fair_chunk)
        most = own
        if holder in self._returned and self.catch_up and not fell_back and learning_cap is None:
            # a micro-batch worker takes the window's room beyond its bucket, less what others are owed (essay)
            most = max(own, capacity - self._total - self._owed_to_others(holder, now_s))
        amount = min(wants, most, capacity - self._total, spent_room, fair_chunk, self._made_room(capacity))
        if learning_cap is not None:
            amount = min(amount, learning_cap - self.granted_to(holder, now_s))
        amount = max(0.0, amount)
        self._owe(holder, min(wants, own, fair_chunk) - amount, now_s)
        self._own[holder] = (max(0.0, own - amount), now_s)
        if capacity - self._total - amount <= 1e-9:
            # spent for longer than a jitter's worth: the window is oversubscribed (a cut, a burst) -- the buckets
            # pause. A shorter span is holders asking at their fair rates, which fill the window exactly: pausing
            # there would lose the refill of every such moment (one holder alone at its limit got 0.89 of it)
            spent_s = self.retry_s(capacity, now_s, pending=amount)
            if spent_s > max(SHORT_SPENT_S * self.window_s, asks_apart_s):
                self._spent_until = now_s + spent_s
        if amount <= 0:
            return 0.0
        self._outstanding[holder] = self._outstanding.get(holder, 0.0) + amount
        bursting = holder in self._returned
        self._count(holder, amount, capacity, now_s, bursts=bursting)
        if bursting and balance is not None and 0 < send <= SEND_AHEAD_SHARE * capacity:
            after = balance + amount
            if after > 0:   # it sends while it holds anything, each send whole: the last overdraws the rest
                sends = math.ceil(after / send - 1e-9) * send
                self._spent.ahead(holder, (sends if coming is None else min(sends, coming)) - after)
        return amount

    def _defers(self, holder: Hashable, wants: float, now_s: float) -> bool:
        """Whether ``holder``'s ask waits (see the essay): it is small -- asked for a window or more, said it wants
        less than the limit lately, and was granted at most ``SMALL_SHARE`` of what a micro-batch worker was in the
        window -- beside that worker, answered short of its due just now; for at most ``DEFER_S`` of the window,
        and not again for as long once served."""
        waiting_since = self._deferred.pop(holder, None)
        if not self.catch_up or wants <= 0 or now_s - self._first_seen.get(holder, now_s) < self.window_s \
                or now_s - self._said_less.get(holder, -math.inf) >= SAID_LESS_WINDOWS * self.window_s \
                or now_s - self._served.get(holder, -math.inf) < DEFER_S * self.window_s:
            return False
        if waiting_since is not None and now_s - waiting_since >= DEFER_S * self.window_s:
            self._served[holder] = now_s
            return False
        hungry = self._small_beside_hungry(holder, now_s)
        if hungry:
            self._deferred[holder] = now_s if waiting_since is None else waiting_since
        elif waiting_since is not None:
            self._served[holder] = now_s
        return hungry

    def _made_room(self, capacity: float) -> float:
        """What the grants made in the window (``_total``, and the ones dated back that slid out before the moment
        they were made did: ``_overhang``) leave of the limit and ``MADE_SLACK`` of it (see the essay)."""
        return capacity * (1 + MADE_SLACK) - self._total - self._overhang_total

    def _owe(self, holder: Hashable, short: float, now_s: float) -> None:
        """``holder``'s answer now fell ``short`` of its bucket's due (within its want and chunk): by the window or
        the spends. An answer in full owes it nothing; nor is anything owed to one that gave back (``short`` 0)."""
        self._forget_short(holder)
        if short > 1e-9:
            self._short_at[holder] = now_s
            self._short_of[holder] = short
            self._short_total += short

    def _forget_short(self, holder: Hashable) -> None:
        self._short_at.pop(holder, None)
        self._short_total -= self._short_of.pop(holder, 0.0)
        if not self._short_of:
            self._short_total = 0.0   # no float dust left behind

    def _owed_to_others(self, holder: Hashable, now_s: float) -> float:
        """What the holders but ``holder`` were last answered short of, within ``OWED_S`` of the window."""
        self._expire_short(now_s)
        return max(0.0, self._short_total - self._short_of.get(holder, 0.0))

    def _small_beside_hungry(self, holder: Hashable, now_s: float) -> bool:
        """Whether a micro-batch worker answered short within ``OWED_S`` of the window was granted in it
        ``1 / SMALL_SHARE`` times what ``holder`` was or more (the newest ``HUNGRY_LOOKED_AT`` of those: an ask
        stays O(1) however many)."""
        self._expire_short(now_s)
        mine = self._per.get(holder, 0.0)
        for other in islice(reversed(self._short_at), HUNGRY_LOOKED_AT):
            theirs = self._per.get(other, 0.0)
            if other != holder and other in self._returned and theirs > 0 and mine <= SMALL_SHARE * theirs:
                return True
        return False

    def _expire_short(self, now_s: float) -> None:
        for gone in expire(self._short_at, now_s - OWED_S * self.window_s):
            self._forget_short(gone)

    def _count(self, holder: Hashable, amount: float, capacity: float, now_s: float, *, bursts: bool) -> None:
        """``amount`` granted to ``holder`` now: in the window (dated, ``_dated``) and in the spends' count."""
        worker = holder in self._returned or holder in self._left
        back_s = (WORKER_DATED_BACK_S if worker else DATED_BACK_S) * self.window_s
        self._log.extend([at, holder, part, now_s] for at, part in self._dated(amount, capacity, now_s, back_s))
        self._total += amount
        self._per[holder] = self._per.get(holder, 0.0) + amount
        self._spent.granted(holder, amount, bursts=bursts)

    def _dated(self, amount: float, capacity: float, now_s: float, back_s: float) -> list[tuple[float, float]]:
        """When a grant of ``amount`` is counted as granted, in parts ``(moment, tokens)``, oldest first: each part at
        the moment the room it takes came free as a grant slid out, if that was within ``back_s`` before now
        (``DATED_BACK_S`` of the window; a micro-batch worker's ``WORKER_DATED_BACK_S``) and not before the newest
        grant's date; the rest now (the room was there before, or came from a give-back, or the grant does not fit the
        window -- a debt repaid beyond it, ``repay``). Dated so, each part fits every window that holds its moment (the
        room only grew since), and slides out a window after its room came free: a token's round is the window, not the
        window and an ask's lag. (Dated whole, at the moment the grant as a whole fitted, the room that an ask took from
        several grants sliding out came back at the newest one's moment: the older ones' tokens took the window and the
        gap between them, every round.)"""
        room = capacity - self._total   # the room at every moment from the newest change until now
        if amount > room + 1e-9:
            return [(now_s, amount)]
        since = now_s - back_s
        if self._log:
            since = max(since, self._log[-1][0])   # (at it: a grant dated then took part of what came free then)
        parts: list[tuple[float, float]] = []
        need = amount
        for at, came, credited in reversed(self._room_came):   # newest first: before each, that much less room
            if at < since:
                break
            if room - came < need - 1e-9:   # this much of the grant needs the room that came then
                part = need - max(0.0, room - came)
                parts.append((now_s if credited else min(now_s, at), part))
                need -= part
                if need <= 1e-9:
                    break
            room -= came
        if need > 1e-9:   # the room was there before anything came since ``since``: not the window's lag
            parts.append((now_s, need))
        parts.sort(key=lambda p: p[0])
        return parts

    def returning(self, holder: Hashable, now_s: float) -> bool:
        """Whether ``holder`` is a micro-batch worker: back from a gap within ``RETURNING_WINDOWS`` windows, having
        spent before it."""
        self._slide(now_s)
        return holder in self._returned

    def fair_rate(self, holder: Hashable, rate_per_s: float, now_s: float) -> float:
        """``holder``'s max-min fair share of ``rate_per_s`` by the askers' wanted rates (one who never said
        wants the whole rate), with any spare shared out in ``n + 1`` parts (one kept for a newcomer)."""
        if self._level is None or self._level[0] != rate_per_s or now_s - self._level_at > LEVEL_REFRESH_S:
            wants = sorted(self._wants_per_s.get(h, rate_per_s) for h in self._askers)
            self._level, self._level_at = (rate_per_s, *_water_level(rate_per_s, wants)), now_s
        _, level, bonus = self._level
        return min(self._wants_per_s.get(holder, rate_per_s), level) + bonus

    def give_back(self, holder: Hashable, amount: float, now_s: float) -> float:
        """Credit ``amount`` unspent tokens back to ``holder``'s newest grants in the window; returns how many
        were credited (never more than it was granted in the window)."""
        left = _amount("amount", amount)
        self._slide(now_s)
        for entry in reversed(self._log):
            if left <= 0:
                break
            if entry[1] == holder and entry[2] > 0:
                take = min(entry[2], left)
                entry[2] -= take
                self._total -= take
                self._per[holder] = self._per.get(holder, 0.0) - take
                left -= take
        self._askers.pop(holder, None)
        self._wants_per_s.pop(holder, None)
        self._owe(holder, 0.0, now_s)   # (gone: owed nothing)
        # it gives back all it was granted since it came (it asked ahead of any work, like a participant waiting to
        # be ready, or its task had no rows): no micro-batch's catch-up comes back with it to echo. (Not "all the
        # window granted it": a stream's worker at a cut limit may give back its one chunk of the window whole,
        # having spent the ones before)
        sent_nothing = self._outstanding.pop(holder, 0.0) - amount <= 1e-9
        if sent_nothing:
            self._left.pop(holder, None)
        else:
            self._left[holder] = now_s
            self._left.move_to_end(holder)
        if holder in self._own:   # kept for a window: if it comes back, it catches up the gap
            self._away[holder] = now_s
            self._away.move_to_end(holder)
            if sent_nothing:
                self._away_unsent.add(holder)
            else:
                self._away_unsent.discard(holder)
        self._level = None
        if amount - left > 0:
            self._room_came.append((now_s, amount - left, True))
        return amount - left

    def repay(self, holder: Hashable, debt: float, capacity: float, now_s: float) -> float:
        """Grant ``holder``, which leaves the limit owing ``debt`` (its last send overdrew its pool), all of it now,
        whether the window has room or not -- no more than it spent in the window (a report of more is a bug, and
        must not shut the others out); returns the amount. Those tokens were spent already, and the spends count
        them from then: granted at the holder's next task instead (a micro-batch later), the window counted them
        late. Granted only where it had room, a 16-worker stream's last sends overdrew a full window every
        micro-batch, the next micro-batch's first grants repaid them, and its own last sends found the window full
        of those repayments and waited half a second: the debt passed on from one micro-batch to the next, and the
        stream read 0.949 of its limit (0.988 with this). A window over its limit by the debts grants nothing until
        they slide out, as an exact window of the spends would."""
        self._slide(now_s)
        amount = min(_amount("debt", debt), self._spent.spent_by(holder, now_s))
        if amount > 0:   # (no longer owed; nor a catch-up counted until its next report: spent already)
            self._count(holder, amount, capacity, now_s, bursts=False)
        return amount

    def frees_s(self, holder: Hashable, capacity: float, now_s: float, pending: float) -> float:
        """Seconds until a grant of ``pending`` to ``holder`` fits both bounds, as far as grants and spends sliding
        out tell (``retry_s``, and the spends' bound: ``limiter.spent``). A worker told only the grants' moment came
        back while its lump of sends a second before, counted from when they were seen, still filled the spends'
        bound (a stream of half-window micro-batches)."""
        spends_s = self._spent.frees_s(self._spends_bound(holder, capacity, now_s), now_s, pending)
        return max(self.retry_s(capacity, now_s, pending), spends_s, self._made_frees_s(capacity, now_s, pending))

    def _made_frees_s(self, capacity: float, now_s: float, pending: float) -> float:
        """Seconds until the grants made in the window (dated back or not) leave room for ``pending`` under the
        limit and ``MADE_SLACK`` of it (``_made_room``)."""
        self._slide(now_s)
        excess = pending - self._made_room(capacity)
        if excess <= 0:
            return 0.0
        # (the grants still in the window were all made after those that slid out: the log is in both orders)
        return self._frees_s(chain(self._overhang, ((e[3], e[2]) for e in self._log)), excess, now_s)

    def _frees_s(self, grants: Iterable[tuple[float, float]], excess: float, now_s: float) -> float:
        """Seconds until ``grants`` (``(moment, amount)``, oldest first) worth more than ``excess`` have slid out,
        each a window after its moment."""
        for at, amount in grants:
            excess -= amount
            if excess < 0:
                return max(0.0, at + self.window_s - now_s)
        return self.window_s

    def _spends_bound(self, holder: Hashable, capacity: float, now_s: float) -> float:
        """The most the spends' count may reach with a grant to ``holder``: the limit and ``HELD_SLACK`` of it, and
        the debt a sole spender may repay beyond that (``limiter.spent``)."""
        return capacity * (1 + HELD_SLACK) + self._spent.excusable(holder, now_s)

    def retry_s(self, capacity: float, now_s: float, pending: float = 0.0) -> float:
        """Seconds until some of the window is free again (0 if some is now); ``pending``: a grant about to be
        added."""
        self._slide(now_s)
        if self._total + pending < capacity:
            return 0.0
        return self._frees_s(((e[0], e[2]) for e in self._log), self._total + pending - capacity, now_s)

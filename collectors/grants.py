"""This participant's share of shared limits: token pools filled by the control plane's grants.

How it works and why
--------------------
A shared limit (tenant, namespace, topic, subscription, resource group) is handed out by the control plane in
chunks of tokens (``limiter.grants``: never more than the limit in any window of its period, over every
participant). Here each shared limiter's buckets are a *pool*: they refill by nothing but ``deposit``s of granted
chunks, up to the limit per period. The hot path never waits on the network: a producer spends its pool locally
and is paused, like any throttled producer, only when the pool is empty.

The ``GrantKeeper`` thread keeps the pools filled (``run_once``, every ``POLL_S`` -- longer when its rounds are
long, so that they take at most ``MAX_DUTY`` of a core, and ``QUIET_S`` while no pool has a producer or holds
anything -- and whenever a producer or dispatcher comes, a limiter throttles a producer, or a producer goes away):

- a pool below half its chunk that admitted something since the last round, or with a producer waiting, asks for
  a chunk (plus its debt, if the first send of a task overdrew it); the control plane answers with what is free and
  the fair chunk for next time, or 0 and ``retry_s`` -- the keeper asks that limit again no sooner, and wakes for it
  if that comes before its next round (a window that frees sooner than a round: ``SOONEST_RETRY_S`` at the
  soonest);
- a pool whose producers are gone (the task ended: its producers were garbage collected) or that for ``IDLE_S``
  admitted nothing and had none of its producers waiting (on it or on another level) gives its unspent tokens back
  at once, so the worker that gets the next task finds them. One whose sends come in bursts a quiet spell of
  ``IDLE_S`` or more apart (its last burst came after one) gives back after ``BURST_IDLE_S``: a trickle sending
  its hundred a second in one burst held the rest of its chunk for half a second after each, granted and not
  sent (2.5-3 % of the limit on average beside a greedy micro-batch job, simulated; 0.8 % with this). A pool that
  pauses for less than ``IDLE_S`` between its sends (a slow sink's requests) keeps its stock through the pauses.
A pool whose producers all say what they have in hand (``Producer.will_send``: the Spark helpers say each batch's
rows) asks for all of it, less what it holds, whenever it asks, and says it (``coming``): the control plane grants a
micro-batch worker that in one answer, within its share (``controlplane.grants``). A keeper's thread gets the CPU
late while sixteen tasks run on two cores: every ask a task saves is a tenth of a second or more of its micro-batch.
Once all of it is charged, the pool asks nothing ahead: its task may be over. After each task PySpark's worker runs
a full garbage collection (``gc.collect()`` in its daemon's loop), which holds the GIL -- 40-50 ms of CPU in a
worker that has pyarrow, pandas and this library loaded, 0.1-0.5 s on two cores running sixteen tasks -- and the
keeper can neither give back nor read an answer until it ends. Traced on the 16-worker stream whose driver commits
each micro-batch, one task in ten had its keeper ask a chunk ahead just after its last send; what was granted (39
tokens, mostly) came back 0.3-0.46 s later, the window full all that while and the micro-batch's last tasks waiting
on it. The next batch says itself, and its first charge, if the pool is dry, wakes the keeper. But a pool whose
producers are still here ``BETWEEN_BATCHES_S`` after their last send is a paced source between two batches (a task
of a source held to its own pace: a batch every quarter second), and asks ahead again as any pool: its batches found
the pool dry at half of them, each waiting a keeper's round and a round trip. A producer waiting on
the pool does not make it ask then either: a pool pauses a producer after the send that overdrew it (as Pulsar's
limiter pauses one after a send that leaves it short), so a task's last send leaves its producer waiting with
nothing more to send, and asked for as for a producer that waits to send, a fair chunk was granted (38.5 tokens of
62.5, mostly) and held until the give-back -- traced on the same stream, 77-87 give-backs of more than 5 tokens in
three runs, 33 with this, most of those in the warm-up. Nor does a producer that what the pool holds is about to
release (``_releasing``): the deposit wakes it on the limiter's own thread, which on two busy cores got the CPU
after the keeper's next round, and that round asked a chunk on top of a batch the pool held.
Each ask also says how fast the pool wants to spend (the control plane's fair split is max-min by these): the whole
limit while a producer waits on it, else what it spends. A pool whose last ask said "the whole limit" and on which
no producer waits any more says what it spends at once, not at its next need. A trickle beside a greedy worker (a
hundred messages a second in one burst, which waits a moment for its pool) went on saying "the whole limit" for
most of each second, the fair split gave it up to half the limit, which it did not send, and the greedy worker's
own bucket refilled at the other half: two Spark applications of one tenant read 0.89-0.90 of its limit, 0.93
with this.
A burst read over its own moments (a hundred sent in four sends 10 ms apart) is several times what the pool spends
over the second. Served, such a pool said that rate and kept it until it gave its tokens back half a second later,
the greedy worker beside it paced at what was left; and it topped itself up to a chunk of that rate, tokens held
unspent in the window all that while. So a pool that said what it spends once served says it again whenever it
spends under ``FALLING`` of what it said (until it waits again or gives back), and a pool asks ahead of its need
only in a round in which it admitted something: one that admits nothing needs nothing more. Simulated, a greedy
worker beside such a trickle: 0.93 of the limit before, 0.99 with both (0.95 and 0.96 with either alone); the two
Spark applications, three alternating pairs: medians 0.918 before, 0.932 with it.
A participant sending steadily below a limit asks about four to six times a second for it; while the limit binds,
each answer is a few tokens of its fair rate and it asks again when the control plane's retry lets it (two to four
workers on one limit: 21-38 asks a second each, measured); a task's first send waits for what is left of the round
trip its producer started (``Participant.producer``); the gap between two micro-batches is caught up, because the
window counts grants, not time. Each ask says what the pool holds and what it spent since the last, and when
(``collectors.spends``): the control plane counts tokens when they are spent too (``limiter.spent``). A pool that
spends what it holds without needing more says so at least every ``SPENDS_EVERY_S`` all the same (an ask for a
token): its grant may have left the window long before its spends.

While the control plane cannot be reached (``unreachable``): a pool spends what it holds for ``OUTAGE_SWITCH_S``
(by then every other participant's pool has run dry too), then the limiter runs at the ``safe`` rate the
control plane last answered (the limit divided by the participants that asked in its last five windows: a static
split, so the limit is held and nobody who was sending stalls). A limiter that was never answered runs at the
limit divided by the most participants any answer counted (at least two): a worker that starts during an
outage does not wait for as long as the outage lasts. When the control plane answers again (``reachable``), the
pools take over, and the next asks say that the participant ran at its safe rate (``fell_back``): no grant counts
those spends, and the control plane refills nothing for that time (``limiter.grants``). An ask that goes
unanswered is an outage too, from when it was sent: a grant ask waits at most ``ASK_TIMEOUT_S`` (twice a chunk's
span: an answer slower than that cannot keep a pool filled), not the reporter's request timeout -- an ask hung for
those 2 s left its pool dry and a producer waiting on the network (measured: 2.4 s), which is what the pools are
there to prevent. A round that asks for thousands of limits at once waits ``ASK_TIMEOUT_PER_LIMIT_S`` a limit if
that is longer (``ask_timeout_s``): the control plane answers one in time linear in them, and an ask of 5,000
limits, answered in ~0.5 s by a control plane of 100,000, timed out now and then and put the whole participant
on its safe rates.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from limiter.policy import Rate
from limiter.publish import RELEASE_TOKENS
from protocol import (
    MAX_ASKS_PER_S,
    Grant,
    GrantAsk,
    GrantRequest,
    Outcomes,
    Spend,
    limit_key,
    parse_limit_key,
)

from .outcomes import OutcomeLog
from .share_rows import NONE, ShareRows
from .spends import SpendLog

__all__ = ["Grants", "GrantKeeper", "Pool", "NOTHING", "IDLE_S", "BURST_IDLE_S", "POLL_S", "QUIET_S", "MAX_DUTY",
           "beat_s", "OUTAGE_SWITCH_S", "SAFE_BURST_S", "SOONEST_RETRY_S", "DEFAULT_CHUNK_S", "ASK_TIMEOUT_S",
           "ASK_TIMEOUT_PER_LIMIT_S", "ask_timeout_s", "HELD_UP_HEADROOM"]

log = logging.getLogger(__name__)

NOTHING = 1e-6          # per second: a pool's own refill (a rate <= 0 would mean unlimited)
IDLE_S = 0.5            # a pool that admitted nothing this long gives its tokens back
# ... or this long, one whose sends come in bursts a quiet spell of IDLE_S or more apart (see the essay)
BURST_IDLE_S = 0.1
POLL_S = 0.02
# a pool whose producers charged all they said and are still here this long after their last send is a paced source
# between two batches (a task's end is followed at once by its producers' collection), and asks ahead again: two tasks
# paced to 80 % of the limit, each batch said only as it came, found the pool dry at half their batches and waited
# 3.2 % of their time for it (Redis 0.5 %); 0.3 % with this
BETWEEN_BATCHES_S = 0.06
# a keeper whose pools' producers are all gone and whose tokens are all given back waits this long for its next
# round, unless woken (a new producer, a throttle, a new dispatcher): sixteen idle Python workers on two cores polled
# 800 times a second, CPU that Spark's driver and the next micro-batch's tasks did not get
QUIET_S = 0.5
# the soonest a limit answered short is asked again: the control plane says when its window frees, which may be
# sooner than a round (a round's phase against that moment cost a micro-batch stream 10-20 ms of every window)
SOONEST_RETRY_S = 0.005
MAX_DUTY = 0.2          # of a core: the most the keeper's rounds take at rest (see ``beat_s``)
OUTAGE_SWITCH_S = 0.5   # after this long unreachable, a pool gives way to the safe rate
# the safe rate's bucket holds this many seconds of it: each micro-batch's first send finds it full after the gap,
# and a tenth held the second after a control-plane restart at 1.1-1.2x the limit (a hundredth: 1.0-1.05). A pool
# back from an outage carries over what the split held, and a hundredth is too little to bridge an ask that hangs:
# a producer then waits until the ask's timeout (ASK_TIMEOUT_S) puts the split back -- at most that, once. (The
# split holds a token more, the one it releases a producer at: the hundredth is room for what refills meanwhile.)
SAFE_BURST_S = 0.01
DEFAULT_CHUNK_S = 0.25  # the first ask of a limit: this many seconds of the whole limit (the answer says more)
ASK_TIMEOUT_S = 2 * DEFAULT_CHUNK_S   # a grant ask unanswered this long: the outage rules, from when it was sent
ASK_TIMEOUT_PER_LIMIT_S = 0.0003      # ... or this long a limit asked for, if longer (from 1,667 limits in one round)
URGENT_WANTS = 1.0      # message tokens an ask that carries a sink's refusal or spends wants, when the pool wants none
# a pool spending from what it holds without asking says what it spent at least this often (an ask for a token): a
# worker sending 100/s on a first chunk of 250 (a quarter second of the whole limit, before its rate was known) spent
# it for 2.5 s, long after the grant left the window, and told it only with its next ask -- the others got the whole
# limit on top, 1.11x in a second
SPENDS_EVERY_S = 0.25
URGENT_EVERY_S = 0.1    # an adaptive limit's refusals are told out of turn at most this often (each one wakes it)
# a pool that said what it spends once its producers stopped waiting says it again when it spends under this part
# of that (until it gives its tokens back or waits again)
FALLING = 0.5
HEADROOM = 1.0          # a pool that is not waiting asks for the rate it spends (waiting: everything)
# held up by another level (its own topic's limit), a pool spends what that level lets through: asking for just that,
# it asked a little less whenever its own grants had come late, and the fair split followed it down (the demo's
# topic clicks, held to 150 by its own limit in a busy tenant, read 0.93 of it). A tenth more, capped by a tenth
# above the other levels' limits (``Pool.ceiling_msgs_per_s``), lets the other level be the one that binds: capped
# at 150 itself, clicks' share of the tenant was exactly its own limit, two pacers at 150 in series, and the later
# of the two set the pace (acme's streams alone: clicks 0.93-0.95 -> 0.99, the tenant 0.98 -> 0.976-0.979)
HELD_UP_HEADROOM = 1.1


@dataclass(frozen=True, slots=True)
class Pool:
    """A shared limiter as the keeper sees it at one poll (``deposit`` adds granted tokens, negative takes)."""

    key: str
    limit: Rate                                    # the configured shared limit
    producers: int                                 # producers (or dispatchers) bound to it now
    waiting: bool                                  # a producer waits on it now
    held_up: bool                                  # a producer bound to it waits on another level now
    admitted: float                                # its admitted-messages counter (cumulative)
    balance: tuple[float | None, float | None]     # (msgs, bytes) tokens held; None: dimension unlimited
    deposit: Callable[[float, float], None]
    eager: bool = False                            # spent whole at each read (dispatch): keep a chunk ahead
    ceiling_msgs_per_s: float | None = None        # the most its producers can spend (their other levels' limits)
    adaptive: bool = False                         # the limit learns its sink's capacity (limiter.adaptive)
    read_balance: Callable[[], tuple[float | None, float | None]] | None = None   # ``balance`` now, not at the poll
    charged_s: float | None = None   # the clock's tick at its producers' newest recorded send, read after ``balance``
    send_msgs: float = 0.0           # the messages of its producers' next send (``PublishRateLimiter.send_msgs``)
    coming_msgs: float | None = None   # what its producers have in hand to send (``Producer.will_send``; None:
    #                                    not known, one of them never says)


class Grants:
    """What the control plane answered for each limit, and whether it can be reached. Thread-safe reads."""

    def __init__(self, now_s: Callable[[], float], rows: ShareRows | None = None):
        self._now_s = now_s
        self.rows = ShareRows() if rows is None else rows   # shared with the keeper and its spend log
        # what is read later of each limit's last answer (a rate or a chunk fits a float32); NONE: never answered
        self._chunk = (self.rows.column("f", 0.0), self.rows.column("f", 0.0))
        self._safe = (self.rows.column("f", NONE), self.rows.column("f", NONE))
        self._fair = (self.rows.column("f", NONE), self.rows.column("f", NONE))
        self._retry_at = self.rows.column("d", -math.inf)
        self._paused_until: dict[str, float] = {}   # an adaptive limit whose sink asked for a pause: until then
        self._outage_since: float | None = None
        # the first of the grant asks that failed in a row: a report that gets through ends an outage, but not
        # this -- a control-plane replica whose grant store is down answers reports and refuses asks, and an
        # outage started afresh at every report never reached the safe rate (the pools ran dry, the limit stalled)
        self._asks_failing_since: float | None = None
        # the limits whose limiters ran at their safe rates since their last answered asks: their next asks say so
        # (``GrantAsk.fell_back``), and the control plane refills nothing for that time -- those spends are in no grant
        self._fell_back: set[str] = set()
        self._most_holders = 0
        # how far apart the asks are to come, as the latest answer that said it (one figure, not a column: the control
        # plane stretches every busy limit's asks together, as it shares one budget of asks between them)
        self._asks_apart_s = 0.0

    @property
    def most_holders(self) -> int:
        """The most participants any answer counted on one limit."""
        return self._most_holders

    def mode(self, key: str, limit: Rate) -> tuple[Rate, tuple[float, float] | None]:
        """The local limiter's (rate, pool capacity) now: a pool (capacity = the limit per period), or the safe
        rate (no pool) once the control plane has been unreachable for ``OUTAGE_SWITCH_S``."""
        since = self._outage_since
        if since is not None and self._now_s() - since >= OUTAGE_SWITCH_S:
            self._fell_back.add(key)
            safe = self._answered(key, self._safe)
            if safe is not None:
                return Rate(_safe(limit.msgs_limited, safe[0]), _safe(limit.bytes_limited, safe[1]), 1), None
            # never answered for this limit: a static split by the most participants any answer counted (at
            # least two) -- a new worker must not wait for as long as the outage lasts
            split = max(2, self._most_holders)
            return Rate(limit.msgs_per_s() / split if limit.msgs_limited else -1,
                        limit.bytes_per_s() / split if limit.bytes_limited else -1, 1), None
        pool = Rate(NOTHING if limit.msgs_limited else -1, NOTHING if limit.bytes_limited else -1, 1)
        return pool, (limit.msgs if limit.msgs_limited else 0.0, limit.bytes if limit.bytes_limited else 0.0)

    def fair(self, key: str) -> tuple[float, float] | None:
        """The fair rates (msgs, bytes per second) the control plane last answered for ``key``, or None."""
        return self._answered(key, self._fair)

    def _answered(self, key: str, columns: tuple[array, array]) -> tuple[float, float] | None:
        """``columns``' (msgs, bytes) of ``key``'s last answer, None if it was never answered."""
        got = self.rows.read(key, self._safe[0], *columns)   # (other threads call this: read under the lock)
        if got is None or math.isnan(got[0]):
            return None
        return got[1], got[2]

    def chunk(self, key: str, limit: Rate) -> tuple[float, float]:
        """The fair chunk to ask for next: what the control plane last said, else ``DEFAULT_CHUNK_S`` of the
        whole limit. (An answer to a give-back says 0: it is no chunk, and must not stop the next ask.)"""
        share = min(1.0, DEFAULT_CHUNK_S / limit.period_s)
        said = self._answered(key, self._chunk) or (0.0, 0.0)
        return (said[0] if said[0] > 0 else limit.msgs * share if limit.msgs_limited else 0.0,
                said[1] if said[1] > 0 else limit.bytes * share if limit.bytes_limited else 0.0)

    @property
    def asks_apart_s(self) -> float:
        """How far apart the control plane wants the asks of a limit, as the latest answer that said it (0: none
        did)."""
        return self._asks_apart_s

    def due(self, key: str, now: float) -> bool:
        row = self.rows.get(key)
        return row is None or now >= self._retry_at[row]

    def next_due_s(self, now: float) -> float:
        """Seconds from ``now`` until the soonest limit answered short may be asked again (inf: none waits)."""
        return min((at for at in self._retry_at if at > now), default=math.inf) - now

    def paused(self, key: str, now: float) -> bool:
        """Whether the sink behind ``key`` (an adaptive limit) asked for a pause that lasts past ``now``."""
        return now < self._paused_until.get(key, -math.inf)

    def ask(self, key: str, wants: tuple[float, float], returns: tuple[float, float] = (0.0, 0.0),
            rate: tuple[float, float] = (0.0, 0.0), held: tuple[float | None, float | None] = (None, None),
            spent: list[Spend] | None = None, outcomes: Outcomes | None = None, send: float = 0.0,
            coming: float | None = None) -> GrantAsk:
        """The ask for ``key``; ``held``/``spent``: what the pool holds after ``returns`` and spent since its last
        ask (``collectors.spends``); ``outcomes``: what the sink answered since (``collectors.outcomes``); ``send``:
        the messages of its producers' next send (what it will send ahead of the grant counts at once); ``coming``:
        the messages they have in hand to send (``Producer.will_send``; None: not known, 0: all of it charged)."""
        level, direction, name = parse_limit_key(key)
        safe = self._answered(key, self._safe) or (0.0, 0.0)
        return GrantAsk(level=level, name=name, direction=direction, held_msgs=held[0], held_bytes=held[1],
                        spent=spent or [], wants_msgs=_tokens(wants[0]), wants_bytes=_tokens(wants[1]),
                        rate_msgs_per_s=_tokens(rate[0]), rate_bytes_per_s=_tokens(rate[1]),
                        returns_msgs=_tokens(returns[0]), returns_bytes=_tokens(returns[1]),
                        safe_msgs_per_s=max(0.0, safe[0]), safe_bytes_per_s=max(0.0, safe[1]), outcomes=outcomes,
                        fell_back=key in self._fell_back, send_msgs=_tokens(send),
                        coming_msgs=None if coming is None else _tokens(coming))

    def record(self, ask: GrantAsk, grant: Grant, now: float) -> None:
        self._asks_failing_since = None
        if ask.fell_back:
            self._fell_back.discard(grant.key)   # (the control plane was told)
        row = self.rows.add(grant.key)
        if ask.wants_msgs > 0 or ask.wants_bytes > 0 or math.isnan(self._safe[0][row]):
            # (a give-back's answer keeps the chunk before it: its own chunk, 0, is no chunk)
            self._chunk[0][row], self._chunk[1][row] = grant.chunk_msgs, grant.chunk_bytes
            self._asks_apart_s = grant.asks_apart_s or self._asks_apart_s
        self._safe[0][row], self._safe[1][row] = grant.safe_msgs_per_s, grant.safe_bytes_per_s
        self._fair[0][row], self._fair[1][row] = grant.fair_msgs_per_s, grant.fair_bytes_per_s
        self._most_holders = max(self._most_holders, grant.holders)
        short = ((ask.wants_msgs > 0 and 0 <= grant.msgs < ask.wants_msgs)
                 or (ask.wants_bytes > 0 and 0 <= grant.bytes < ask.wants_bytes))
        self._retry_at[row] = now + max(grant.retry_s, SOONEST_RETRY_S) if short else now
        if grant.pause_s > 0:
            self._paused_until[grant.key] = now + grant.pause_s
        else:
            self._paused_until.pop(grant.key, None)

    @property
    def outage_since(self) -> float | None:
        return self._outage_since

    def unreachable(self, since: float | None = None) -> None:
        """The control plane cannot be reached, since ``since`` (default: now; an ask that timed out: when it was
        sent) unless an outage already runs."""
        if self._outage_since is None:
            self._outage_since = self._now_s() if since is None else min(since, self._now_s())

    def ask_failed(self, since: float) -> None:
        """A grant ask sent at ``since`` failed: an outage, from the first ask of those that failed in a row."""
        if self._asks_failing_since is None:
            self._asks_failing_since = min(since, self._now_s())
        self.unreachable(self._asks_failing_since)

    def reachable(self) -> None:
        self._outage_since = None

    def forget(self, keep: set[str]) -> None:
        for key in self.rows.forget(keep):
            self._paused_until.pop(key, None)
            self._fell_back.discard(key)


def _releasing(pool: Pool) -> bool:
    """Whether what ``pool`` holds is about to release the producers waiting on it: the deposit that filled it
    wakes them on the limiter's own thread, which may get the CPU after the keeper's next round. Each send goes while
    the pool holds ``RELEASE_TOKENS``, so it holds that in every dimension, and in messages all its producers said
    they have in hand but that (else the send the first of them waits to make)."""
    if pool.eager or any(b is not None and b < RELEASE_TOKENS for b in pool.balance):
        return False
    return pool.balance[0] is None or pool.balance[0] >= (
        pool.coming_msgs - RELEASE_TOKENS if pool.coming_msgs else pool.send_msgs)


def _safe(limited: bool, per_s: float) -> float:
    return max(per_s, NOTHING) if limited else -1.0


def _tokens(v: float | None) -> float:
    return v if v is not None and math.isfinite(v) and v > 0 else 0.0


def ask_timeout_s(limits: int) -> float:
    """How long a grant ask for ``limits`` limits waits for its answer before the outage rules apply."""
    return max(ASK_TIMEOUT_S, limits * ASK_TIMEOUT_PER_LIMIT_S)


def beat_s(poll_s: float, round_s: float) -> float:
    """How long the keeper waits for the next round (a wake-up cuts it short): ``poll_s``, or longer when a round
    took ``round_s`` of CPU, so that at rest its thread takes at most ``MAX_DUTY`` of a core (a round looks at
    every pool: 7 ms at 100 shared limits, a third of a core at a 20-ms beat, and it takes the GIL from the task
    it serves)."""
    return max(poll_s, round_s * (1 - MAX_DUTY) / MAX_DUTY)


class GrantKeeper:
    """Keeps the pools filled and gives back what idle ones hold (see the module essay)."""

    def __init__(self, participant_id: str, grants: Grants, pools: Callable[[], list[Pool]],
                 send: Callable[[GrantRequest], list[Grant]], refresh: Callable[[], None],
                 now_s: Callable[[], float], poll_s: float = POLL_S, idle_s: float = IDLE_S,
                 burst_idle_s: float = BURST_IDLE_S,
                 known: Callable[[], Iterable[str]] | None = None,
                 adaptive: Callable[[str], bool] | None = None):
        self.me, self.grants = participant_id, grants
        # every shared limit it has a limiter of, a pool or not (its safe split): what a round keeps the rows of
        self._known = known
        # whether a limit key is an adaptive shared limit by this participant's policies: the outcomes of one it
        # holds no pool of are told in asks of their own (``_outcome_asks``)
        self._adaptive = adaptive
        self._pools, self._send, self._refresh, self._now_s = pools, send, refresh, now_s
        self.poll_s, self.idle_s, self.burst_idle_s = poll_s, idle_s, min(burst_idle_s, idle_s)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        rows = grants.rows   # one row per limit, shared with the answers and the spends (``share_rows``)
        self._moved = (rows.column("d", NONE), rows.column("d", 0.0))   # (admitted counter, when it last moved)
        self._pace = (rows.column("d", 0.0), rows.column("d", NONE), rows.column("f", -1.0))   # (counter, at,
        # msgs/s spent: an EWMA, -1 until measured)
        self._left = rows.column("B", 0)   # 1: it told the control plane it is done with it (until it asks again)
        self._hungry = rows.column("B", 0)   # 1: a producer waited on it at its last ask
        self._bursty = rows.column("B", 0)   # 1: its last move came after a quiet spell of idle_s or more
        self._urgent_at: dict[str, float] = {}   # key -> when a refusal was last told out of turn (adaptive only)
        # key -> the rate a pool said it spends once its producers stopped waiting, while it spends less and less
        # (a burst served: see the essay). Only such pools, so a dict, not a column
        self._falling: dict[str, float] = {}
        self.spends = SpendLog(rows=rows)
        self.outcomes = OutcomeLog(now_s)
        self._lock = threading.Lock()   # one round at a time: the keeper's thread, or a new producer's
        self.asks = 0
        self.returns = 0
        self.told = 0   # asks that carried outcomes alone
        self.failures = 0
        self.quiet = False   # its last round found nothing to watch: no producer on any pool, nothing held

    def wake(self) -> None:
        self._wake.set()

    @property
    def running(self) -> bool:
        """Whether its thread keeps the pools (else whoever drives ``run_once`` does)."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="throttlescope-grants", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        wait_s = self.poll_s
        while not self._stop.is_set():
            self._wake.wait(wait_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            started = time.thread_time()   # the round's own CPU: a slow answer is no reason to wait longer
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - a bug must not kill the keeper; the limits stay as they are
                log.debug("throttlescope: grant keeper round failed", exc_info=True)
            # (read before the round's CPU is taken: a look at every limit's retry, counted in the keeper's duty)
            due_s = self.grants.next_due_s(self._now_s())
            wait_s = beat_s(self.poll_s, time.thread_time() - started)
            if self.quiet:
                wait_s = max(wait_s, QUIET_S)
            elif wait_s <= self.poll_s:   # (a cheap round: one sooner, when an answer said to come back sooner)
                wait_s = min(wait_s, max(SOONEST_RETRY_S, due_s))

    def run_once(self) -> int:
        """One look at every pool; sends the asks and returns due. Returns how many asks went out. Also called
        by a new dispatcher's thread (or a producer's, when no keeper thread runs), so that its first read
        finds its pools filled (one round trip)."""
        with self._lock:
            return self._round()

    def _round(self) -> int:
        now = self._now_s()
        self.quiet = False
        if self.grants.outage_since is not None:
            self._refresh()   # the outage rules move with time; retrying is the reporter's, with its backoff
            return 0
        asks: list[tuple[GrantAsk, Pool | None]] = []
        seen = set()
        quiet = True
        for pool in self._pools():
            seen.add(pool.key)
            quiet = quiet and pool.producers == 0
            row = self.spends.look(pool.key, pool.balance, now, pool.charged_s)   # (its row, shared with the answers)
            moved_at = self._moved_at(row, pool.admitted, now, pool.waiting or pool.held_up)
            held = tuple(max(0.0, b or 0.0) for b in pool.balance)
            idle = now - moved_at >= (self.burst_idle_s if self._bursty[row] else self.idle_s)
            if pool.producers == 0 or idle:
                if held[0] > 0 or held[1] > 0 or not self._left[row]:
                    # give back what it holds, and say it is done (even holding nothing, or a debt: the others'
                    # fair shares grow at once); a debt stays here, for its next task to repay
                    self._deposit(pool, -held[0], -held[1])
                    kept = tuple(None if b is None else min(b, 0.0) for b in pool.balance)
                    asks.append((self.grants.ask(pool.key, (0.0, 0.0), (held[0], held[1]), held=kept,
                                                 spent=self.spends.unsent(pool.key, now),
                                                 outcomes=self.outcomes.take(pool.key)), pool))
                    self._left[row], self._hungry[row] = 1, 0
                    self._falling.pop(pool.key, None)
                continue
            self._left[row] = 0
            # an adaptive limit's refusal is told at once (the control plane cuts the rate for every sender at the
            # first), unless the sink's pause is on (the control plane knows, and answers nothing until it ends);
            # at most every URGENT_EVERY_S: a sink refusing thousands a second must not make as many asks
            urgent = pool.adaptive and self._refusal_told_now(pool.key, now)
            if not urgent and not self.grants.due(pool.key, now):
                continue
            fair = self.grants.chunk(pool.key, pool.limit)
            spent_per_s = self._spent_per_s(row, pool.admitted, now)
            # every batch its producers said they have in hand is charged: it asks nothing ahead (their task may be
            # over -- see the essay); the next batch says itself, and its first charge wakes the keeper if it is dry
            sent_all = pool.coming_msgs == 0.0
            # ... unless its producers are still here BETWEEN_BATCHES_S after their last send, and send at intervals
            # shorter than a give-back's idle time: a paced source between two batches, whose next one is coming
            # (its producers are here: a pool without any gave back above)
            paced = (sent_all and pool.charged_s is not None and not self._bursty[row]
                     and now - pool.charged_s >= BETWEEN_BATCHES_S)
            # hungry: a producer waits on it -- not one paused after its batch's last send (it has nothing more to
            # send), nor one that what the pool holds is about to release (see the essay) -- or it is spent whole
            # at each read (dispatch) and empty: its reads shrank to what it had
            hungry = (pool.waiting and not sent_all and not _releasing(pool)) or (
                pool.eager and any(b is not None and b <= 0 for b in pool.balance))
            wants = [0.0, 0.0]
            for i, b in enumerate(pool.balance):
                if b is None:
                    continue
                # waiting: a fair chunk (the control plane caps it); else what the pool spends in a chunk's time
                # (a participant sending little holds little), asked for when half of it is left
                # (a pool spent whole at each read keeps a fair chunk ahead: a level that does not bind must not
                # run dry under one that does, and throttle reads it has room for)
                own = (fair[i] if spent_per_s is None or i == 1 or pool.eager
                       else min(fair[i], spent_per_s * DEFAULT_CHUNK_S))
                if hungry or (b < (own if pool.eager else own / 2) and (pool.eager or moved_at == now or paced)
                              and (not sent_all or paced)):
                    wants[i] = (fair[i] if hungry else own) - min(b, 0.0) - max(b, 0.0) * (not hungry)
                if i == 0 and wants[0] > 0 and pool.coming_msgs is not None:
                    # asking, with a batch in hand: all of it (the control plane grants a micro-batch worker what is
                    # coming in one answer, within its share; the last answer's chunk may be a send's)
                    wants[0] = max(wants[0], pool.coming_msgs - b)
            # its last ask said "the whole limit" (a producer waited), and none waits now: it says what it spends
            # at once, not at its next need -- a trickle's burst served, the whole limit stood for a second
            # (not while one still waits, about to be released; nor once all its producers said is charged: their
            # task may be over, and the give-back says it)
            stale = self._hungry[row] and not pool.waiting and not pool.eager and not sent_all
            said = self._falling.get(pool.key)
            if said is not None and (hungry or spent_per_s is None):
                del self._falling[pool.key]
            elif said is not None and spent_per_s < FALLING * said:
                stale = True   # it spends well under what it said: says so, or its share stands unspent
            if wants[0] <= 0 and pool.balance[0] is not None and (urgent or stale
                                                                    or self._spends_due(pool.key, now)):
                wants[0] = URGENT_WANTS   # (an ask wanting nothing would say the participant is done with it)
            if wants[0] > 0 or wants[1] > 0:
                # how fast it wants to spend: everything while a producer waits, else what it spends (a tenth more
                # while held up by another level), within what its other levels let through
                limit = pool.limit
                whole = (limit.msgs_per_s() if limit.msgs_limited else 0.0,
                         limit.bytes_per_s() if limit.bytes_limited else 0.0)
                if limit.msgs_limited and pool.ceiling_msgs_per_s is not None:
                    # its producers cannot spend faster than their other levels let them: a tenant's topic held to
                    # 150 by its own limit that said "the whole tenant" whenever it waited took a third of it in
                    # the fair split, and left the tenant's other topics short
                    # (held up by that level, a tenth above it: see HELD_UP_HEADROOM)
                    ceiling = pool.ceiling_msgs_per_s * (HELD_UP_HEADROOM if pool.held_up else 1.0)
                    whole = (min(whole[0], ceiling), whole[1])
                self._hungry[row] = hungry
                if not hungry and spent_per_s is not None and (stale or pool.key in self._falling):
                    self._falling[pool.key] = spent_per_s
                rate = whole if hungry or spent_per_s is None else (
                    min(whole[0], (HELD_UP_HEADROOM if pool.held_up else HEADROOM) * spent_per_s), whole[1])
                asks.append((self.grants.ask(pool.key, (wants[0], wants[1]), rate=rate, held=pool.balance,
                                             spent=self.spends.unsent(pool.key, now),
                                             outcomes=self.outcomes.take(pool.key),
                                             send=pool.send_msgs, coming=pool.coming_msgs), pool))
        telling = self._outcome_asks(seen, now, asks)
        for by_key in (self._urgent_at, self._falling):   # (the small dicts of a few limits: theirs only)
            for key in [k for k in by_key if k not in seen and k not in telling]:
                del by_key[key]
        # frees the rows of the limits it no longer holds -- not of one at its safe split now (the reporter's
        # round ends an outage before it puts the pools back): that row keeps the split last answered, which the
        # next outage falls back on (without it: the limit / 2 for a participant that is alone)
        keep = seen | telling
        if self._known is not None and len(self.grants.rows) > len(keep):
            keep.update(self._known())
        self.grants.forget(keep)
        self.spends.forget(keep)
        self.outcomes.forget(keep)
        self.quiet = quiet and not asks   # (a give-back just sent: quiet from the next round on)
        if not asks:
            return 0
        try:
            answers = self._send(GrantRequest(participant_id=self.me, asks=[a for a, _ in asks], sent_s=now))
        except Exception as e:  # noqa: BLE001 - any failure: the outage rules apply; the reporter retries
            self.failures += 1
            for ask, _ in asks:
                if ask.outcomes is not None:
                    self.outcomes.restore(limit_key(ask.level, ask.direction, ask.name), ask.outcomes)
            self.grants.ask_failed(since=now)   # (from when the ask was sent: it may have hung for its timeout)
            log.debug("throttlescope: grant ask failed: %s", e)
            self._refresh()
            return 0
        for (ask, pool), grant in zip(asks, answers, strict=False):
            self.grants.record(ask, grant, now)
            if pool is None:   # outcomes alone: nothing held, nothing granted
                self.told += 1
                continue
            self.spends.answered(pool.key)
            if grant.msgs > 0 or grant.bytes > 0:
                self._deposit(pool, max(0.0, grant.msgs), max(0.0, grant.bytes))
            if grant.pause_s > 0:
                # the sink asked every sender for a pause: what the pool holds is not spent until it ends (the
                # control plane counts it as spent; its producers wait for the grants after the pause). What it
                # holds now: its producers spent from it while the ask was out, and taking the poll's balance
                # back left the pool in debt, to be repaid after the pause
                held = (pool.read_balance() if pool.read_balance is not None else pool.balance)[0] or 0.0
                if held > 0:
                    self._deposit(pool, -held, 0.0)
            if ask.wants_msgs > 0 or ask.wants_bytes > 0:
                self.asks += 1
            else:
                self.returns += 1
        return len(asks)

    def _refusal_told_now(self, key: str, now: float) -> bool:
        """Whether a refusal the sink of ``key`` (an adaptive limit) answered is to be told out of turn now -- one
        waits, the sink's pause is not on, and none was told in the last ``URGENT_EVERY_S`` -- and if so, that it
        is told now."""
        if (not self.outcomes.urgent(key) or self.grants.paused(key, now)
                or now - self._urgent_at.get(key, -math.inf) < URGENT_EVERY_S):
            return False
        self._urgent_at[key] = now
        return True

    def _outcome_asks(self, seen: set[str], now: float, asks: list[tuple[GrantAsk, Pool | None]]) -> set[str]:
        """Add an ask of outcomes alone for each adaptive limit this participant has outcomes of and no pool
        (``seen``: the limits it has pools of): its sends go out in another process than its limiter's, and
        the control plane learns from them all the same. A refusal is told at once (``_refusal_told_now``), any
        other outcome once it has waited ``SPENDS_EVERY_S``.
        Returns those limits (told now or still to be)."""
        if self._adaptive is None:
            return set()
        kept = set()
        for key in self.outcomes.waiting():
            if key in seen or not self._adaptive(key):
                continue   # (a pool's go with its asks; a limit that is not adaptive learns nothing from them)
            kept.add(key)
            if self._refusal_told_now(key, now) or now - self.outcomes.since(key) >= SPENDS_EVERY_S:
                asks.append((self.grants.ask(key, (0.0, 0.0), outcomes=self.outcomes.take(key)), None))
        return kept

    def _spends_due(self, key: str, now: float) -> bool:
        """Whether the pool of ``key`` has spends older than a steady sender's asks are apart: ``SPENDS_EVERY_S``,
        or longer for a limit shared by many, as the control plane stretches their chunks (the asks of a limit
        stay near ``MAX_ASKS_PER_S``, however many participants share it, or near its part of the control plane's
        budget of asks: ``Grant.asks_apart_s``)."""
        oldest = self.spends.oldest_unsent_s(key)
        return oldest is not None and now - oldest >= max(SPENDS_EVERY_S, self.grants.asks_apart_s,
                                                          self.grants.most_holders / MAX_ASKS_PER_S)

    def _deposit(self, pool: Pool, msgs: float, bytes_: float) -> None:
        pool.deposit(msgs, bytes_)
        self.spends.deposited(pool.key, msgs, bytes_)   # (not a spend)

    def _spent_per_s(self, row: int, admitted: float, now: float) -> float | None:
        """Messages per second the pool of ``row`` spends (an average over about a second), None until
        measured."""
        counters, ats, rates = self._pace
        at, rate = ats[row], rates[row]
        if math.isnan(at):
            counters[row], ats[row] = admitted, now
            return None
        if now - at < 0.1:
            return None if rate < 0 else rate
        sample = max(0.0, admitted - counters[row]) / (now - at)
        rate = sample if rate < 0 else 0.7 * rate + 0.3 * sample
        counters[row], ats[row], rates[row] = admitted, now, rate
        return rate

    def _moved_at(self, row: int, admitted: float, now: float, waited: bool) -> float:
        """When the pool of ``row`` last admitted something or had a producer waiting (a dispatcher in backoff
        after a throttled read waits too, between two polls)."""
        counters, ats = self._moved
        if admitted != counters[row] or waited:   # (NaN, a new row's counter, equals nothing)
            if counters[row] == counters[row]:   # (not a new row: its quiet spell before this move is known)
                quiet_s = now - ats[row]
                if quiet_s >= self.idle_s:
                    self._bursty[row] = 1
                elif quiet_s > self.burst_idle_s:
                    self._bursty[row] = 0   # it pauses briefly between its sends: keeps its stock through them
            counters[row], ats[row] = admitted, now
            return now
        return ats[row]
